-- gorm-outbox: idempotency records of consumers (package idempotency).
CREATE TABLE IF NOT EXISTS outbox_idempotency (
    idempotency_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status       VARCHAR(16)  NOT NULL,
    token        VARCHAR(64)  NOT NULL DEFAULT '',
    result       LONGBLOB,
    locked_until DATETIME(6),
    expires_at   DATETIME(6)  NOT NULL,
    created_at   DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (idempotency_key),
    KEY outbox_idempotency_expires_idx (expires_at),
    CONSTRAINT outbox_idempotency_status_check CHECK (status IN ('running', 'succeeded'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
