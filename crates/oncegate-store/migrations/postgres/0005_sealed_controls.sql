-- Every control chained (see the SQLite migration 0009 for the model): kill switches
-- (and holds), findings and limit reservations carry seals linked to the audit record
-- that wrote them. A cleared switch stays as a row with no reason.
ALTER TABLE kill_switches ALTER COLUMN reason DROP NOT NULL;
ALTER TABLE kill_switches ADD COLUMN audit_shard BIGINT;
ALTER TABLE kill_switches ADD COLUMN audit_seq BIGINT;
ALTER TABLE kill_switches ADD COLUMN row_hash TEXT;

ALTER TABLE findings ADD COLUMN audit_shard BIGINT;
ALTER TABLE findings ADD COLUMN audit_seq BIGINT;
ALTER TABLE findings ADD COLUMN row_hash TEXT;

-- The audit record's copies of the control seals it carries (filled on insert, like
-- row_intent_key), so a control's newest seal is an index lookup.
ALTER TABLE audit ADD COLUMN row_switch_key TEXT;
ALTER TABLE audit ADD COLUMN row_finding_key TEXT;
CREATE INDEX audit_by_row_switch ON audit (row_switch_key, id);
CREATE INDEX audit_by_row_finding ON audit (row_finding_key, id);

-- Each budget's ledger and its head (the head lives on the budget's row in
-- limit_scopes, which every reserving commit already locks).
CREATE TABLE limit_ledger (
    scope       TEXT        NOT NULL,
    seq         BIGINT      NOT NULL,
    key         TEXT        NOT NULL,
    generation  BIGINT      NOT NULL,
    amount      BIGINT      NOT NULL,
    at          BIGINT      NOT NULL,
    reserve     BOOLEAN     NOT NULL,
    chain       TEXT        NOT NULL,
    PRIMARY KEY (scope, seq)
);
ALTER TABLE limit_scopes ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
ALTER TABLE limit_scopes ADD COLUMN chain TEXT;
ALTER TABLE limit_scopes ADD COLUMN audit_shard BIGINT;
ALTER TABLE limit_scopes ADD COLUMN audit_seq BIGINT;

-- Reservations made before this instant (µs) may have no ledger (see SQLite 0009).
INSERT INTO meta (name, value)
    VALUES ('controls_sealed_at', ((extract(epoch from now()) * 1000000)::bigint)::text);
