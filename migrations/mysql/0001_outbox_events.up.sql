-- gorm-outbox: the outbox table (MySQL 8.0.13+, MariaDB 10.6+).
-- Times are UTC (DATETIME has no zone; the relay compares with UTC_TIMESTAMP(6)).
CREATE TABLE IF NOT EXISTS outbox_events (
    id             BIGINT       NOT NULL AUTO_INCREMENT,
    event_id       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    type           VARCHAR(255) NOT NULL,
    version        INT          NOT NULL DEFAULT 1,
    tenant_id      VARCHAR(128) NOT NULL DEFAULT '',
    aggregate_type VARCHAR(128) NOT NULL DEFAULT '',
    aggregate_id   VARCHAR(255) NOT NULL DEFAULT '',
    partition_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    topic          VARCHAR(255) NOT NULL DEFAULT '',
    payload        LONGBLOB,
    headers        MEDIUMTEXT,
    status         VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempts       INT          NOT NULL DEFAULT 0,
    max_attempts   INT          NOT NULL DEFAULT 0,
    available_at   DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    claim_version  BIGINT       NOT NULL DEFAULT 0,
    locked_by      VARCHAR(128),
    locked_until   DATETIME(6),
    last_error     TEXT,
    published_at   DATETIME(6),
    created_at     DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (id),
    UNIQUE KEY outbox_events_event_id_key (event_id),
    -- InnoDB has no partial indexes. The claim reads one status at a time
    -- in (available_at, id) order from this index (id is implied), so the
    -- index delivers the ORDER BY and SKIP LOCKED locks only the rows it
    -- returns. It also finds the few publishing rows whose lease expired.
    KEY outbox_events_claim_idx (status, available_at),
    KEY outbox_events_key_idx (partition_key, status, id),
    KEY outbox_events_aggregate_idx (aggregate_type, aggregate_id),
    CONSTRAINT outbox_events_status_check
        CHECK (status IN ('pending', 'publishing', 'published', 'failed', 'dead'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Writers of one partition key lock its row here before inserting, so the
-- ids of a key are assigned in commit order (InnoDB has no transaction-scoped
-- advisory lock). Rows are pruned by the relay's retention.
CREATE TABLE IF NOT EXISTS outbox_events_keys (
    partition_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    locked_at     DATETIME(6)  NOT NULL,
    PRIMARY KEY (partition_key),
    KEY outbox_events_keys_locked_at_idx (locked_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
