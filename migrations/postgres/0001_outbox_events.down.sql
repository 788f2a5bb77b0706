DROP TABLE IF EXISTS outbox_events;
DROP FUNCTION IF EXISTS outbox_events_notify();
