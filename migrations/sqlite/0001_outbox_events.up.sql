-- gorm-outbox: the outbox table (SQLite 3.35+).
-- Times are stored as UTC text, written by the library; compare them only
-- with UTC values bound from Go.
CREATE TABLE IF NOT EXISTS outbox_events (
    id             INTEGER      PRIMARY KEY AUTOINCREMENT,
    event_id       VARCHAR(128) NOT NULL,
    type           VARCHAR(255) NOT NULL,
    version        INTEGER      NOT NULL DEFAULT 1,
    tenant_id      VARCHAR(128) NOT NULL DEFAULT '',
    aggregate_type VARCHAR(128) NOT NULL DEFAULT '',
    aggregate_id   VARCHAR(255) NOT NULL DEFAULT '',
    partition_key  VARCHAR(255) NOT NULL DEFAULT '',
    topic          VARCHAR(255) NOT NULL DEFAULT '',
    payload        BLOB,
    headers        TEXT,
    status         VARCHAR(16)  NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'publishing', 'published', 'failed', 'dead')),
    attempts       INTEGER      NOT NULL DEFAULT 0,
    max_attempts   INTEGER      NOT NULL DEFAULT 0,
    available_at   DATETIME     NOT NULL,
    claim_version  INTEGER      NOT NULL DEFAULT 0,
    locked_by      VARCHAR(128),
    locked_until   DATETIME,
    last_error     TEXT,
    published_at   DATETIME,
    created_at     DATETIME     NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS outbox_events_event_id_key ON outbox_events (event_id);

CREATE INDEX IF NOT EXISTS outbox_events_claim_idx
    ON outbox_events (available_at, id) WHERE status IN ('pending', 'failed');

CREATE INDEX IF NOT EXISTS outbox_events_key_idx
    ON outbox_events (partition_key, id) WHERE status IN ('pending', 'publishing', 'failed');

CREATE INDEX IF NOT EXISTS outbox_events_lease_idx
    ON outbox_events (locked_until) WHERE status = 'publishing';

CREATE INDEX IF NOT EXISTS outbox_events_aggregate_idx
    ON outbox_events (aggregate_type, aggregate_id);
