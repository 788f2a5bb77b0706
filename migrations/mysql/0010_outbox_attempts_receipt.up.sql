-- gorm-outbox: the attempt log's receipt (relay.SetReceipt): where the
-- publisher delivered the event, such as a Kafka topic, partition and
-- offset, recorded with a published outcome; NULL for the others and for
-- publishers that report none.
--
-- One statement: MySQL commits DDL by itself.
ALTER TABLE outbox_events_attempts ADD COLUMN receipt TEXT NULL;
