-- gorm-outbox: each relay's heartbeat says where it delivers (its publisher's description).
ALTER TABLE outbox_events_relays ADD COLUMN IF NOT EXISTS publisher VARCHAR(255) NOT NULL DEFAULT '';
