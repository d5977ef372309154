-- Admission control (docs/admission.md). A key's own request rate: NULL keeps the gateway's
-- default, 0 is unlimited. A business type's timer insert rate: 0 is unlimited. Queues keep
-- theirs in their JSON config.
ALTER TABLE courier_api_keys ADD COLUMN IF NOT EXISTS rate_per_second DOUBLE PRECISION;
ALTER TABLE courier_api_keys ADD COLUMN IF NOT EXISTS rate_burst INTEGER NOT NULL DEFAULT 0;
ALTER TABLE courier_biz_types ADD COLUMN IF NOT EXISTS insert_rate_per_second DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE courier_biz_types ADD COLUMN IF NOT EXISTS insert_burst INTEGER NOT NULL DEFAULT 0;
