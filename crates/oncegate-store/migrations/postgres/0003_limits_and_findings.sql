-- Spend and action limits (see the SQLite migration 0007 for the model). A commit that
-- reserves first locks its budget's row in limit_scopes (FOR UPDATE), so replicas
-- reserving against one budget take turns and none can spend what another just took.
CREATE TABLE limit_scopes (
    scope  TEXT PRIMARY KEY
);
CREATE TABLE reservations (
    scope        TEXT        NOT NULL,
    key          TEXT        NOT NULL,
    generation   BIGINT      NOT NULL,
    amount       BIGINT      NOT NULL,
    reserved_at  TIMESTAMPTZ NOT NULL,
    active       BOOLEAN     NOT NULL,
    PRIMARY KEY (scope, key, generation)
);
CREATE INDEX reservations_active_by_scope ON reservations (scope, reserved_at) WHERE active;
CREATE INDEX reservations_by_intent ON reservations (key, generation);

CREATE TABLE findings (
    id               TEXT        PRIMARY KEY,
    rule             TEXT        NOT NULL,
    raised_at        TIMESTAMPTZ NOT NULL,
    body             TEXT        NOT NULL,
    delivered_at     TIMESTAMPTZ,
    attempts         BIGINT      NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ
);
CREATE INDEX findings_by_raised ON findings (raised_at);
CREATE INDEX findings_due ON findings (next_attempt_at) WHERE delivered_at IS NULL;
