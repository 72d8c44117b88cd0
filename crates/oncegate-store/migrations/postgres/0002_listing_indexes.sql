-- Listing and sweep queries, one index per filter shape, each ordered by updated_at so
-- `ORDER BY updated_at LIMIT n` reads n index entries instead of sorting: the sweep's
-- "oldest unknown" and `GET /v1/intents?state=unknown` cost what they return, not what
-- the store holds. intents_by_updated (0001) serves the unfiltered listing.
DROP INDEX intents_by_state;
CREATE INDEX intents_by_state_updated ON intents (state, updated_at);
CREATE INDEX intents_by_state_capability_updated ON intents (state, capability, updated_at);
CREATE INDEX intents_by_capability_updated ON intents (capability, updated_at);
CREATE INDEX intents_breaker_tripped ON intents (updated_at) WHERE breaker_tripped;
