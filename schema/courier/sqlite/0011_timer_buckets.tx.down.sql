DROP TABLE courier_rate_limits;
DROP TABLE courier_timers;
ALTER TABLE courier_biz_types DROP COLUMN failure_topic;
ALTER TABLE courier_biz_types DROP COLUMN failure_url;
ALTER TABLE courier_biz_types DROP COLUMN timer_retention_ms;
ALTER TABLE courier_biz_types DROP COLUMN timer_mode;
