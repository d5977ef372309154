-- Admission control (docs/admission.md). A key's own request rate: NULL keeps the gateway's
-- default, 0 is unlimited. A business type's timer insert rate: 0 is unlimited. Queues keep
-- theirs in their JSON config.
ALTER TABLE courier_api_keys ADD COLUMN rate_per_second REAL;
ALTER TABLE courier_api_keys ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 0;
ALTER TABLE courier_biz_types ADD COLUMN insert_rate_per_second REAL NOT NULL DEFAULT 0;
ALTER TABLE courier_biz_types ADD COLUMN insert_burst INTEGER NOT NULL DEFAULT 0;
