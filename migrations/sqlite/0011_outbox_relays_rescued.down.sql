ALTER TABLE outbox_events_relays DROP COLUMN rescued;
