-- A record written through the API (POST /v1/outbox) with an Idempotency-Key: the key, unique
-- while the record is kept, and a hash of what was asked, so a repeat of the same request
-- answers the record it made and a repeat with another body is refused (docs/api.md, "Safe
-- retries"). NULL for rows producers write themselves. Nullable and without a default, so
-- adding them rewrites no rows.
ALTER TABLE courier_outbox ADD COLUMN idempotency_key TEXT;
ALTER TABLE courier_outbox ADD COLUMN request_hash TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS courier_outbox_idempotency_key_idx ON courier_outbox (idempotency_key) WHERE idempotency_key IS NOT NULL;
