ALTER TABLE courier_biz_types DROP COLUMN insert_burst;
ALTER TABLE courier_biz_types DROP COLUMN insert_rate_per_second;
ALTER TABLE courier_api_keys DROP COLUMN rate_burst;
ALTER TABLE courier_api_keys DROP COLUMN rate_per_second;
