-- gorm-outbox: the attempt log (relay.WithAttemptLog). One row per claim of
-- an event that ended: published, retried, dead, snoozed, unavailable,
-- released, or rescued (its lease expired). Written in the transaction that
-- records the claim's outcome, so a record exists exactly when the outcome
-- was recorded (a completion refused by fencing writes none). Deleted with
-- its event by retention and purges. One record per claim: the unique key
-- on (event_row_id, claim_version) also serves the lookup by event. Times
-- are UTC.
--
-- One statement: MySQL commits DDL by itself.
CREATE TABLE IF NOT EXISTS outbox_events_attempts (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    event_row_id  BIGINT       NOT NULL,
    event_id      VARCHAR(128) NOT NULL,
    relay_id      VARCHAR(128) NOT NULL,
    attempt       INTEGER      NOT NULL,
    claim_version BIGINT       NOT NULL,
    outcome       VARCHAR(16)  NOT NULL,
    duration_us   BIGINT       NOT NULL DEFAULT 0,
    error         TEXT,
    created_at    DATETIME(6)  NOT NULL,
    UNIQUE KEY outbox_events_attempts_claim_idx (event_row_id, claim_version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
