-- Ordered keys (docs/flow-control.md, "Ordered keys in the outbox").
--
-- SQLite runs one write transaction at a time, so ids are taken in commit order: commit_seq
-- stays empty here and the order of a key's records is their id (COALESCE(commit_seq, id), as
-- on PostgreSQL, where a commit-time trigger numbers them).
ALTER TABLE courier_outbox ADD COLUMN commit_seq INTEGER;

CREATE INDEX IF NOT EXISTS courier_outbox_key_idx
    ON courier_outbox ("key", id) WHERE status IN ('pending', 'dispatched') AND "key" <> '';

-- A key whose next record spent its retry budget: its later records wait until an operator
-- redrives or skips that record.
CREATE TABLE IF NOT EXISTS courier_outbox_blocked_keys (
    "key"      TEXT    PRIMARY KEY,
    record_id  INTEGER NOT NULL,
    topic      TEXT    NOT NULL,
    reason     TEXT    NOT NULL DEFAULT '',
    blocked_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))
);
CREATE INDEX IF NOT EXISTS courier_outbox_blocked_keys_record_idx ON courier_outbox_blocked_keys (record_id);
