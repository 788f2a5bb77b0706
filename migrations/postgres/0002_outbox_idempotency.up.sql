-- gorm-outbox: idempotency records of consumers (package idempotency).
CREATE TABLE IF NOT EXISTS outbox_idempotency (
    idempotency_key VARCHAR(255) PRIMARY KEY,
    status       VARCHAR(16)  NOT NULL,
    token        VARCHAR(64)  NOT NULL DEFAULT '',
    result       BYTEA,
    locked_until TIMESTAMPTZ,
    expires_at   TIMESTAMPTZ  NOT NULL,
    created_at   TIMESTAMPTZ  NOT NULL DEFAULT now(),
    CONSTRAINT outbox_idempotency_status_check CHECK (status IN ('running', 'succeeded'))
);

CREATE INDEX IF NOT EXISTS outbox_idempotency_expires_idx ON outbox_idempotency (expires_at);
