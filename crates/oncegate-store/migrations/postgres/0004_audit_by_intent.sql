-- An intent's timeline (the console's intent page, `StoreRead::audit_of_intent`): every
-- audit record naming the intent key, in chain order, through an index (see the SQLite
-- migration 0008). `body` is the record's JSON as text; the cast is immutable.
CREATE INDEX audit_by_key ON audit (((body::jsonb) ->> 'key'), id);
