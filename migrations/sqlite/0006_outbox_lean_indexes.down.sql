DROP INDEX IF EXISTS outbox_events_dead_idx;
DROP INDEX IF EXISTS outbox_events_published_idx;
