-- What the console reads: an intent's timeline and the intent search.
-- An intent's timeline (the console's intent page, `StoreRead::audit_of_intent`): every
-- audit record naming the intent key, in chain order, through an index (see the SQLite
-- migration 0008). A column written at insert, not an index over `body::jsonb`: that
-- cast refuses a body holding the JSON escape \u0000 (an effect reference can carry
-- one), and an expression index would then refuse to write the record at all.
ALTER TABLE audit ADD COLUMN intent_key TEXT;
-- Records written before: their key, read from the JSON where PostgreSQL can read it
-- (a body with \u0000 stays NULL and is missing from its intent's timeline).
UPDATE audit SET intent_key = (body::jsonb) ->> 'key'
 WHERE strpos(body, '\u0000') = 0 AND body LIKE '%"key":"%';
CREATE INDEX audit_by_key ON audit (intent_key, id);
-- The console's intent search: by run and by business reference, whatever their age,
-- newest first.
CREATE INDEX intents_by_run_updated ON intents (run_id, updated_at);
CREATE INDEX intents_by_ref_updated ON intents (business_ref, updated_at);
