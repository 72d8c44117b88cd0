-- Every control chained: kill switches (and holds), findings and limit reservations
-- carry seals linked to the audit record that wrote them, as intents and approvals do,
-- so a deleted or edited one is refused at load and reported by `audit verify`.
-- Rows from before this migration are sealed as found at the first open
-- (`controls_sealed` in meta); after that an unsealed one is tampering.

-- A cleared switch stays as a row with no reason: a missing row is always a deletion.
CREATE TABLE kill_switches_sealed (
    target       TEXT    PRIMARY KEY,
    reason       TEXT,
    set_by       TEXT    NOT NULL,
    set_at       INTEGER NOT NULL,
    audit_shard  INTEGER,
    audit_seq    INTEGER,
    row_hash     TEXT
);
INSERT INTO kill_switches_sealed (target, reason, set_by, set_at)
    SELECT target, reason, set_by, set_at FROM kill_switches;
DROP TABLE kill_switches;
ALTER TABLE kill_switches_sealed RENAME TO kill_switches;
CREATE INDEX audit_by_row_switch ON audit (json_extract(body, '$.detail.row_switch.key'), id);

ALTER TABLE findings ADD COLUMN audit_shard INTEGER;
ALTER TABLE findings ADD COLUMN audit_seq INTEGER;
ALTER TABLE findings ADD COLUMN row_hash TEXT;
CREATE INDEX audit_by_row_finding ON audit (json_extract(body, '$.detail.row_finding.key'), id);

-- Each budget's ledger: every reservation made (or made again) and every release, in
-- order, each entry chained to the one before (`chain`). The head names the last entry
-- and the audit record that sealed it. A reservation is checked against the ledger's
-- entries in its window (the ledger says what the window holds; `reservations` is what
-- the sum reads): a deleted or edited entry, or a reservation the ledger does not
-- explain, refuses new charges on that budget until reconciled.
CREATE TABLE limit_ledger (
    scope       TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    key         TEXT    NOT NULL,
    generation  INTEGER NOT NULL,
    amount      INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    reserve     INTEGER NOT NULL,
    chain       TEXT    NOT NULL,
    PRIMARY KEY (scope, seq)
);
CREATE TABLE limit_heads (
    scope        TEXT    PRIMARY KEY,
    seq          INTEGER NOT NULL,
    chain        TEXT    NOT NULL,
    audit_shard  INTEGER NOT NULL,
    audit_seq    INTEGER NOT NULL
);

-- Reservations made before this instant (ms) may have no ledger: a budget whose
-- reservations all predate it gets its ledger written from them, as found.
INSERT INTO meta (name, value)
    VALUES ('controls_sealed_at', CAST(CAST(strftime('%s', 'now') AS INTEGER) * 1000 AS TEXT));
