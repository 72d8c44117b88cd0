-- oncegate on PostgreSQL, version 1: the whole schema of the SQLite store's five
-- migrations in one, for a store shared by several gateway replicas.
--
-- Records are kept whole as JSON text in `body` (text, not jsonb: the row seal hashes
-- the body as written, and jsonb would reorder keys and respell numbers); the other
-- columns are the indexed copies the queries need. Times are timestamptz.
--
-- Plain SQL only (no advisory locks, no LISTEN/NOTIFY, no extensions), so the schema
-- also suits Postgres-compatible distributed databases. Later migrations must stay
-- additive: `oncegate migrate` runs while replicas of the previous version serve.

-- The store's identity, written once when the schema is created.
CREATE TABLE meta (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
INSERT INTO meta (name, value) VALUES ('store_id', replace(gen_random_uuid()::text, '-', ''));
-- Every row carries a seal from the start: nothing to adopt.
INSERT INTO meta (name, value) VALUES ('rows_sealed', 'at creation');

CREATE TABLE intents (
    key               TEXT        NOT NULL,
    generation        BIGINT      NOT NULL,
    capability        TEXT        NOT NULL,
    state             TEXT        NOT NULL,
    cross_key         TEXT,
    run_id            TEXT,
    business_ref      TEXT,
    breaker_tripped   BOOLEAN     NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    -- The lease's expiry by the database's clock (`now()` of the commit that wrote it),
    -- so a takeover is judged by one clock for every replica.
    lease_expires_at  TIMESTAMPTZ,
    version           BIGINT      NOT NULL,
    body              TEXT        NOT NULL,
    audit_shard       BIGINT,
    audit_seq         BIGINT,
    row_hash          TEXT,
    PRIMARY KEY (key, generation)
);
CREATE INDEX intents_by_state ON intents (state, capability);
CREATE INDEX intents_by_cross_key ON intents (cross_key);
CREATE INDEX intents_by_updated ON intents (updated_at);

CREATE TABLE approvals (
    id           TEXT        PRIMARY KEY,
    key          TEXT        NOT NULL,
    generation   BIGINT      NOT NULL,
    state        TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    version      BIGINT      NOT NULL,
    body         TEXT        NOT NULL,
    audit_shard  BIGINT,
    audit_seq    BIGINT,
    row_hash     TEXT
);
CREATE INDEX approvals_by_state ON approvals (state, created_at);

-- The audit log: one hash chain per shard; `id` orders the export. The `row_*`
-- columns copy the row seals of the event (`detail.row_intent` / `detail.row_approval`,
-- which the hash covers), filled on insert, so a row's newest seal is an index lookup.
CREATE TABLE audit (
    id                     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    shard                  BIGINT NOT NULL,
    seq                    BIGINT NOT NULL,
    prev_hash              TEXT   NOT NULL,
    hash                   TEXT   NOT NULL,
    body                   TEXT   NOT NULL,
    row_intent_key         TEXT,
    row_intent_generation  BIGINT,
    row_approval_key       TEXT,
    UNIQUE (shard, seq)
);
CREATE INDEX audit_by_row_intent ON audit (row_intent_key, row_intent_generation, id);
CREATE INDEX audit_by_row_approval ON audit (row_approval_key, id);

-- The head of each shard's chain, read under a row lock (`SELECT ... FOR UPDATE`) by
-- every commit that appends to the shard, and moved in the same transaction.
CREATE TABLE audit_heads (
    shard  BIGINT PRIMARY KEY,
    seq    BIGINT NOT NULL,
    hash   TEXT   NOT NULL
);

-- A coded orchestrator's own Idempotency-Key, bound to the intent it first named.
CREATE TABLE client_keys (
    principal    TEXT        NOT NULL,
    capability   TEXT        NOT NULL,
    client_key   TEXT        NOT NULL,
    intent_key   TEXT        NOT NULL,
    args_digest  TEXT        NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (principal, capability, client_key)
);

CREATE TABLE kill_switches (
    target  TEXT        PRIMARY KEY,
    reason  TEXT        NOT NULL,
    set_by  TEXT        NOT NULL,
    set_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE mcp_sessions (
    id          TEXT        PRIMARY KEY,
    principal   TEXT,
    state       TEXT,
    updated_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX mcp_sessions_by_age ON mcp_sessions (updated_at);

-- Background work one replica at a time (reconciling one intent); expiry by `now()`.
CREATE TABLE work_claims (
    work   TEXT        PRIMARY KEY,
    owner  TEXT        NOT NULL,
    until  TIMESTAMPTZ NOT NULL
);
