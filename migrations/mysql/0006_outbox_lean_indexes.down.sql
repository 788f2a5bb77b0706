ALTER TABLE outbox_events
    DROP INDEX outbox_events_published_idx;
