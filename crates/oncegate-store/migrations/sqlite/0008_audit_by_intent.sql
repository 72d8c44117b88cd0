-- An intent's timeline (the console's intent page, `StoreRead::audit_of_intent`): every
-- audit record naming the intent key, in chain order, read through an index instead of a
-- scan of the whole log. Every record of an intent names its key (`$.key`), whether or
-- not it wrote a row; `audit_by_row_intent` covers only the records that wrote one.
CREATE INDEX audit_by_key ON audit (json_extract(body, '$.key'), id);
