-- oncegate embedded store, version 1.
-- Records are kept whole as JSON in `body`; the other columns are the indexed copies
-- the queries need. SQLite has no native timestamp: times are Unix milliseconds.

CREATE TABLE intents (
    key              TEXT    NOT NULL,
    generation       INTEGER NOT NULL,
    capability       TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    cross_key        TEXT,
    run_id           TEXT,
    business_ref     TEXT,
    breaker_tripped  INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    version          INTEGER NOT NULL,
    body             TEXT    NOT NULL,
    PRIMARY KEY (key, generation)
);
CREATE INDEX intents_by_state ON intents (state, capability);
CREATE INDEX intents_by_cross_key ON intents (cross_key);

CREATE TABLE approvals (
    id          TEXT    PRIMARY KEY,
    key         TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    state       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    body        TEXT    NOT NULL
);
CREATE INDEX approvals_by_state ON approvals (state, created_at);

-- The audit log: one hash chain per shard; `id` orders the export.
CREATE TABLE audit (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    shard      INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    prev_hash  TEXT    NOT NULL,
    hash       TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    UNIQUE (shard, seq)
);

CREATE TABLE audit_heads (
    shard  INTEGER PRIMARY KEY,
    seq    INTEGER NOT NULL,
    hash   TEXT    NOT NULL
);
