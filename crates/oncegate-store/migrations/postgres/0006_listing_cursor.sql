-- Cursor paging for the listings (`GET /v1/intents`, `/v1/approvals`, `/v1/findings`):
-- a page starts after the last row of the one before, by its sort key and then its id,
-- so the listings order ties by id and every index they walk ends in (time, id): the
-- next page is a range on the index (a row comparison), never an OFFSET.
DROP INDEX intents_by_state_updated;
DROP INDEX intents_by_state_capability_updated;
DROP INDEX intents_by_capability_updated;
DROP INDEX intents_by_updated;
DROP INDEX intents_breaker_tripped;
DROP INDEX intents_by_run_updated;
DROP INDEX intents_by_ref_updated;
CREATE INDEX intents_by_state_updated ON intents (state, updated_at, key, generation);
CREATE INDEX intents_by_state_capability_updated ON intents (state, capability, updated_at, key, generation);
CREATE INDEX intents_by_capability_updated ON intents (capability, updated_at, key, generation);
CREATE INDEX intents_by_updated ON intents (updated_at, key, generation);
CREATE INDEX intents_breaker_tripped ON intents (updated_at, key, generation) WHERE breaker_tripped;
CREATE INDEX intents_by_run_updated ON intents (run_id, updated_at, key, generation);
CREATE INDEX intents_by_ref_updated ON intents (business_ref, updated_at, key, generation);

DROP INDEX approvals_by_state;
CREATE INDEX approvals_by_state_created ON approvals (state, created_at, id);
CREATE INDEX approvals_by_created ON approvals (created_at, id);

DROP INDEX findings_by_raised;
CREATE INDEX findings_by_raised ON findings (raised_at, id);

-- `gateway.pending_approvals_per_agent`: an agent's pending approvals, counted when it
-- makes a call that would be held. Columns written at insert (not an index over
-- `body::jsonb`, which refuses a body holding \u0000; see 0004).
ALTER TABLE approvals ADD COLUMN principal TEXT;
ALTER TABLE approvals ADD COLUMN expires_at TIMESTAMPTZ;
UPDATE approvals
   SET principal = (body::jsonb) ->> 'principal',
       expires_at = ((body::jsonb) ->> 'expires_at')::timestamptz
 WHERE strpos(body, '\u0000') = 0;
CREATE INDEX approvals_pending_by_principal ON approvals (principal, expires_at)
    WHERE state = 'pending';
