-- gorm-outbox: index the claim by partition key (MySQL 8.0.13+, MariaDB 10.6+).
--
-- InnoDB has no partial indexes: both indexes lead with status, so that the
-- claimable rows (pending, failed) and the rows in flight (publishing) lie
-- in ranges apart from the published history.
--   claim index (status, partition_key, available_at): events without a key
--     in (available_at, id) order (status = ? AND partition_key = '').
--   key index (status, partition_key, id): each key's first pending, failed
--     and publishing event (a loose index scan from key to key), and the
--     events that follow a key's head, in id order.
--
-- One statement: MySQL commits DDL by itself, so a file of several could be
-- left half applied.
ALTER TABLE outbox_events
    DROP INDEX outbox_events_claim_idx,
    ADD INDEX outbox_events_claim_idx (status, partition_key, available_at),
    DROP INDEX outbox_events_key_idx,
    ADD INDEX outbox_events_key_idx (status, partition_key, id);
