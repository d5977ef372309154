DROP INDEX IF EXISTS courier_outbox_idempotency_key_idx;
ALTER TABLE courier_outbox DROP COLUMN request_hash;
ALTER TABLE courier_outbox DROP COLUMN idempotency_key;
