-- What a replica decides with, kept in the store rather than one process's memory:
-- kill switches (they survive a restart), 2025-11-25 MCP sessions (formerly files
-- beside the database), and claims on background work (reconciling one intent).

CREATE TABLE kill_switches (
    target  TEXT    PRIMARY KEY,
    reason  TEXT    NOT NULL,
    set_by  TEXT    NOT NULL,
    set_at  INTEGER NOT NULL
);

CREATE TABLE mcp_sessions (
    id          TEXT    PRIMARY KEY,
    principal   TEXT,
    state       TEXT,
    updated_at  INTEGER NOT NULL
);
CREATE INDEX mcp_sessions_by_age ON mcp_sessions (updated_at);

CREATE TABLE work_claims (
    work   TEXT    PRIMARY KEY,
    owner  TEXT    NOT NULL,
    until  INTEGER NOT NULL
);
