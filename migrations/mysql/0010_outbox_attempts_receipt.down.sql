ALTER TABLE outbox_events_attempts DROP COLUMN receipt;
