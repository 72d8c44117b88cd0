-- Pinned tool definitions of fronted MCP servers (`[[mcp_servers]]`): the definition
-- (description, input schema, annotations, output schema; canonical JSON) each tool had
-- when oncegate first offered it, and a different one seen since, held until an admin
-- accepts it. Times in milliseconds since the epoch, as elsewhere in this store.
CREATE TABLE tool_pins (
    server              TEXT    NOT NULL,
    tool                TEXT    NOT NULL,
    digest              TEXT    NOT NULL,
    definition          TEXT    NOT NULL,
    pinned_at           INTEGER NOT NULL,
    pinned_by           TEXT    NOT NULL,
    pending_digest      TEXT,
    pending_definition  TEXT,
    pending_at          INTEGER,
    PRIMARY KEY (server, tool)
);
