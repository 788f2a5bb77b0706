-- gorm-outbox: the attempt log (relay.WithAttemptLog). One row per claim of
-- an event that ended: published, retried, dead, snoozed, unavailable,
-- released, or rescued (its lease expired). Written in the transaction that
-- records the claim's outcome, so a record exists exactly when the outcome
-- was recorded (a completion refused by fencing writes none). Deleted with
-- its event by retention and purges. One record per claim: the unique index
-- on (event_row_id, claim_version) also serves the lookup by event. Times
-- are bound by the relay, UTC.
CREATE TABLE IF NOT EXISTS outbox_events_attempts (
    id            INTEGER      PRIMARY KEY AUTOINCREMENT,
    event_row_id  INTEGER      NOT NULL,
    event_id      VARCHAR(128) NOT NULL,
    relay_id      VARCHAR(128) NOT NULL,
    attempt       INTEGER      NOT NULL,
    claim_version INTEGER      NOT NULL,
    outcome       VARCHAR(16)  NOT NULL,
    duration_us   INTEGER      NOT NULL DEFAULT 0,
    error         TEXT,
    created_at    DATETIME     NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS outbox_events_attempts_claim_idx
    ON outbox_events_attempts (event_row_id, claim_version);
