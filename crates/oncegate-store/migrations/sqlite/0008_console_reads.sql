-- What the console reads: an intent's timeline and the intent search.
-- An intent's timeline (the console's intent page, `StoreRead::audit_of_intent`): every
-- audit record naming the intent key, in chain order, read through an index instead of a
-- scan of the whole log. Every record of an intent names its key (`$.key`), whether or
-- not it wrote a row; `audit_by_row_intent` covers only the records that wrote one.
CREATE INDEX audit_by_key ON audit (json_extract(body, '$.key'), id);
-- The console's intent search: by run and by business reference, whatever their age,
-- newest first.
CREATE INDEX intents_by_run_updated ON intents (run_id, updated_at);
CREATE INDEX intents_by_ref_updated ON intents (business_ref, updated_at);
