ALTER TABLE outbox_events
    DROP INDEX outbox_events_claim_idx,
    ADD INDEX outbox_events_claim_idx (status, available_at),
    DROP INDEX outbox_events_key_idx,
    ADD INDEX outbox_events_key_idx (partition_key, status, id);
