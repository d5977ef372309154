DROP INDEX IF EXISTS courier_timers_schedule_idx;
ALTER TABLE courier_timers DROP COLUMN IF EXISTS schedule_version;
ALTER TABLE courier_timers DROP COLUMN IF EXISTS schedule_id;
DROP TABLE IF EXISTS courier_schedules;
