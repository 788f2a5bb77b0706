-- gorm-outbox: the write path wakes the relays itself (PostgreSQL).
--
-- The INSERT that writes events NOTIFYs the table's channel in the same
-- statement (pg_notify, delivered when the transaction commits), so the
-- statement trigger of 0001 is no longer needed: its PL/pgSQL call cost
-- each writing transaction 20-40 µs. During a rolling upgrade, writers of
-- an older version no longer wake the relays; the relays then find their
-- events by polling (relay.DefaultListenPollInterval), and nothing is lost.
DROP TRIGGER IF EXISTS outbox_events_notify ON outbox_events;
DROP FUNCTION IF EXISTS outbox_events_notify();
