-- gorm-outbox: index the claim by partition key (SQLite).
--
-- A claim takes events without a key in (available_at, id) order from the
-- claim index, and the events with a key by walking the key index from key
-- to key (each key's first unfinished event is its head). Each index holds
-- only the rows its half of the claim reads, so a backlog of keyed events
-- never lies in the way of the unkeyed ones, and every insert maintains one
-- of the two instead of both.
DROP INDEX IF EXISTS outbox_events_claim_idx;
CREATE INDEX outbox_events_claim_idx
    ON outbox_events (available_at, id) WHERE status IN ('pending', 'failed') AND partition_key = '';

DROP INDEX IF EXISTS outbox_events_key_idx;
CREATE INDEX outbox_events_key_idx
    ON outbox_events (partition_key, id) WHERE status IN ('pending', 'publishing', 'failed') AND partition_key <> '';
