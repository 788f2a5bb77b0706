-- gorm-outbox: heartbeats of running relays (read by relay.GetStats). Times are UTC.
CREATE TABLE IF NOT EXISTS outbox_events_relays (
    id           VARCHAR(128) PRIMARY KEY,
    host         VARCHAR(255) NOT NULL DEFAULT '',
    pid          INTEGER      NOT NULL DEFAULT 0,
    heartbeat_ms INTEGER      NOT NULL DEFAULT 0,
    started_at   DATETIME(6) NOT NULL,
    last_beat    DATETIME(6) NOT NULL,
    claimed      BIGINT       NOT NULL DEFAULT 0,
    published    BIGINT       NOT NULL DEFAULT 0,
    failed       BIGINT       NOT NULL DEFAULT 0,
    dead         BIGINT       NOT NULL DEFAULT 0,
    lost         BIGINT       NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
