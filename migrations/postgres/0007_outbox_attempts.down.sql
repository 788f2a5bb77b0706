DROP TABLE IF EXISTS outbox_events_attempts;
