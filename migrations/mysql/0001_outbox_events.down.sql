DROP TABLE IF EXISTS outbox_events_keys;
DROP TABLE IF EXISTS outbox_events;
