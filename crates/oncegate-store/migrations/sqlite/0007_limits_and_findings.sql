-- Spend and action limits: one row per (budget, intent generation) that reserved
-- against it, inside the claim's own commit. `active` = 0 once the effect definitely
-- did not happen (failed, not applied); a repeat re-activates the same row, so one
-- intent never counts twice. The window is a range over `reserved_at` (ms).
CREATE TABLE reservations (
    scope        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    generation   INTEGER NOT NULL,
    amount       INTEGER NOT NULL,
    reserved_at  INTEGER NOT NULL,
    active       INTEGER NOT NULL,
    PRIMARY KEY (scope, key, generation)
);
CREATE INDEX reservations_active_by_scope ON reservations (scope, reserved_at) WHERE active = 1;
CREATE INDEX reservations_by_intent ON reservations (key, generation);

-- Detection findings, each raised once (the id is derived from what was found), and
-- the webhook outbox's state beside them.
CREATE TABLE findings (
    id               TEXT    PRIMARY KEY,
    rule             TEXT    NOT NULL,
    raised_at        INTEGER NOT NULL,
    body             TEXT    NOT NULL,
    delivered_at     INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER
);
CREATE INDEX findings_by_raised ON findings (raised_at);
CREATE INDEX findings_due ON findings (next_attempt_at) WHERE delivered_at IS NULL;
