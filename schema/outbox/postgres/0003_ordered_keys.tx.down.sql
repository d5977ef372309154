DROP TABLE IF EXISTS courier_outbox_blocked_keys;
DROP INDEX IF EXISTS courier_outbox_key_idx;
DROP TRIGGER IF EXISTS courier_outbox_commit_seq ON courier_outbox;
DROP FUNCTION IF EXISTS courier_outbox_commit_seq();
DROP TABLE IF EXISTS courier_outbox_settings;
ALTER TABLE courier_outbox DROP COLUMN IF EXISTS commit_seq;
