DROP INDEX IF EXISTS courier_tasks_timeout_idx;
ALTER TABLE courier_tasks DROP COLUMN timeout_at;
ALTER TABLE courier_tasks DROP COLUMN batch_id;
