-- gorm-outbox: each relay's heartbeat counts the expired claims it rescued on their own, not as failures.
ALTER TABLE outbox_events_relays ADD COLUMN rescued BIGINT NOT NULL DEFAULT 0;
