-- gorm-outbox: retention indexed (MySQL/MariaDB).
--
-- InnoDB updates only the secondary indexes whose columns an UPDATE
-- changes, so the aggregate index costs an event one entry, at its insert,
-- and stays. published_at is NULL until the completion sets it, once:
-- indexed, retention (and purge, and the admin page's throughput) reads
-- only the rows it deletes or counts instead of scanning the history.
-- Dead events are found through the claim index, which leads with status.
ALTER TABLE outbox_events
    ADD INDEX outbox_events_published_idx (published_at);
