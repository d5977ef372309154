DROP TABLE IF EXISTS courier_outbox_blocked_keys;
DROP INDEX IF EXISTS courier_outbox_key_idx;
ALTER TABLE courier_outbox DROP COLUMN commit_seq;
