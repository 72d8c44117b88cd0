-- Coded orchestrators may send their own Idempotency-Key; it is bound to the intent it
-- first named, scoped to the principal and the capability.
CREATE TABLE client_keys (
    principal    TEXT    NOT NULL,
    capability   TEXT    NOT NULL,
    client_key   TEXT    NOT NULL,
    intent_key   TEXT    NOT NULL,
    args_digest  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (principal, capability, client_key)
);
