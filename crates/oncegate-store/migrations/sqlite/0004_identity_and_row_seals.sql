-- Store identity and row seals.
--
-- `meta` names the store: `store_id` is written once, when the schema is created
-- (`oncegate init`, or this migration on a store from before it), so `serve` can tell
-- an oncegate store from a missing, empty or foreign file, and an anchor from another
-- store is never checked against this one. `rows_sealed` is set once every row carries
-- a seal (rows from before this migration are adopted at the first open).
CREATE TABLE meta (
    name   TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);
INSERT INTO meta (name, value) VALUES ('store_id', lower(hex(randomblob(16))));

-- Each row names the audit record that wrote its current version (shard, seq) and the
-- hash of its body's canonical JSON, which that record's event also carries.
ALTER TABLE intents ADD COLUMN audit_shard INTEGER;
ALTER TABLE intents ADD COLUMN audit_seq INTEGER;
ALTER TABLE intents ADD COLUMN row_hash TEXT;
ALTER TABLE approvals ADD COLUMN audit_shard INTEGER;
ALTER TABLE approvals ADD COLUMN audit_seq INTEGER;
ALTER TABLE approvals ADD COLUMN row_hash TEXT;

-- The newest seal of a row, found from the audit event itself (hashed, so not editable
-- without breaking the chain): used on every load, and on the miss path to tell "never
-- written" from "deleted". The query text must repeat these expressions exactly.
CREATE INDEX audit_by_row_intent ON audit (
    json_extract(body, '$.detail.row_intent.key'),
    json_extract(body, '$.detail.row_intent.generation')
);
CREATE INDEX audit_by_row_approval ON audit (json_extract(body, '$.detail.row_approval.key'));
