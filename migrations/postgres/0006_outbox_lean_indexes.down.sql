DROP INDEX IF EXISTS outbox_events_dead_idx;
DROP INDEX IF EXISTS outbox_events_published_idx;
CREATE INDEX IF NOT EXISTS outbox_events_aggregate_idx
    ON outbox_events (aggregate_type, aggregate_id);
