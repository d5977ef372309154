DROP INDEX IF EXISTS courier_outbox_idempotency_key_idx;
ALTER TABLE courier_outbox DROP COLUMN IF EXISTS request_hash;
ALTER TABLE courier_outbox DROP COLUMN IF EXISTS idempotency_key;
