DROP TABLE IF EXISTS outbox_idempotency;
