-- Pinned tool definitions of fronted MCP servers (see the SQLite migration 0011): the
-- definition each tool had when oncegate first offered it, and a different one seen
-- since, held until an admin accepts it. Shared by every replica.
CREATE TABLE tool_pins (
    server              TEXT        NOT NULL,
    tool                TEXT        NOT NULL,
    digest              TEXT        NOT NULL,
    definition          TEXT        NOT NULL,
    pinned_at           TIMESTAMPTZ NOT NULL,
    pinned_by           TEXT        NOT NULL,
    pending_digest      TEXT,
    pending_definition  TEXT,
    pending_at          TIMESTAMPTZ,
    PRIMARY KEY (server, tool)
);
