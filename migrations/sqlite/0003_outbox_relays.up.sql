-- gorm-outbox: heartbeats of running relays (read by relay.GetStats).
CREATE TABLE IF NOT EXISTS outbox_events_relays (
    id           VARCHAR(128) PRIMARY KEY,
    host         VARCHAR(255) NOT NULL DEFAULT '',
    pid          INTEGER      NOT NULL DEFAULT 0,
    heartbeat_ms INTEGER      NOT NULL DEFAULT 0,
    started_at   DATETIME     NOT NULL,
    last_beat    DATETIME     NOT NULL,
    claimed      INTEGER      NOT NULL DEFAULT 0,
    published    INTEGER      NOT NULL DEFAULT 0,
    failed       INTEGER      NOT NULL DEFAULT 0,
    dead         INTEGER      NOT NULL DEFAULT 0,
    lost         INTEGER      NOT NULL DEFAULT 0
);
