ALTER TABLE courier_biz_types DROP COLUMN IF EXISTS insert_burst;
ALTER TABLE courier_biz_types DROP COLUMN IF EXISTS insert_rate_per_second;
ALTER TABLE courier_api_keys DROP COLUMN IF EXISTS rate_burst;
ALTER TABLE courier_api_keys DROP COLUMN IF EXISTS rate_per_second;
