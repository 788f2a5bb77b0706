-- gorm-outbox: indexes that earn their cost (PostgreSQL).
--
-- On PostgreSQL an UPDATE that changes an indexed column (status is in
-- every partial index's predicate) writes a new entry into every index of
-- the table, and the relay updates each event twice (claim, completion).
-- An index over all rows therefore costs three entries per event. This
-- migration keeps only what the write path, the relay and retention read:
--
-- * The aggregate index is dropped: nothing on the event's way reads it,
--   and it cost a quarter of the index entries written per event.
--   Applications (or operators using the admin page's aggregate filter on
--   a large table) that look events up by aggregate create it themselves:
--     CREATE INDEX outbox_events_aggregate_idx
--         ON outbox_events (aggregate_type, aggregate_id);
-- * Published events are indexed by published_at, so that retention (and
--   purge, and the admin page's throughput and counts) read only the rows
--   they delete or count instead of scanning the history. Its entry is
--   written once, by the completion, in place of the aggregate index's.
-- * Dead events are indexed by partition key and id: they are few, so the
--   index costs nothing on the way of a published event, and it answers
--   "what is dead" and "why is this key stuck" without a scan.
--
-- CREATE INDEX blocks writes to the table while it runs: on an outbox that
-- holds a large history, delete published rows first (outbox purge).
DROP INDEX IF EXISTS outbox_events_aggregate_idx;

CREATE INDEX IF NOT EXISTS outbox_events_published_idx
    ON outbox_events (published_at) WHERE status = 'published';

CREATE INDEX IF NOT EXISTS outbox_events_dead_idx
    ON outbox_events (partition_key, id) WHERE status = 'dead';
