-- gorm-outbox: idempotency records of consumers (package idempotency).
CREATE TABLE IF NOT EXISTS outbox_idempotency (
    idempotency_key VARCHAR(255) PRIMARY KEY,
    status       VARCHAR(16)  NOT NULL CHECK (status IN ('running', 'succeeded')),
    token        VARCHAR(64)  NOT NULL DEFAULT '',
    result       BLOB,
    locked_until DATETIME,
    expires_at   DATETIME     NOT NULL,
    created_at   DATETIME     NOT NULL
);

CREATE INDEX IF NOT EXISTS outbox_idempotency_expires_idx ON outbox_idempotency (expires_at);
