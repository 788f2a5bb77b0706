-- gorm-outbox: retention and dead events indexed (SQLite).
--
-- SQLite updates only the indexes whose columns (or partial-index
-- predicates) an UPDATE changes, so the aggregate index costs an event one
-- entry, at its insert, and stays. Published events are indexed by
-- published_at, so that retention (and purge, and the admin page's
-- throughput and counts) reads only the rows it deletes or counts instead
-- of scanning the history; dead events by partition key and id, so that
-- "what is dead" and "why is this key stuck" need no scan.
CREATE INDEX IF NOT EXISTS outbox_events_published_idx
    ON outbox_events (published_at) WHERE status = 'published';

CREATE INDEX IF NOT EXISTS outbox_events_dead_idx
    ON outbox_events (partition_key, id) WHERE status = 'dead';
