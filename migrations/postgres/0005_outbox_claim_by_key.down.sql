DROP INDEX IF EXISTS outbox_events_claim_idx;
CREATE INDEX outbox_events_claim_idx
    ON outbox_events (available_at, id) WHERE status IN ('pending', 'failed');

DROP INDEX IF EXISTS outbox_events_key_idx;
CREATE INDEX outbox_events_key_idx
    ON outbox_events (partition_key, id) WHERE status IN ('pending', 'publishing', 'failed');
