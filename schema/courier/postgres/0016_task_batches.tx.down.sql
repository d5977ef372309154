DROP INDEX IF EXISTS courier_tasks_timeout_idx;
ALTER TABLE courier_tasks DROP COLUMN IF EXISTS timeout_at;
ALTER TABLE courier_tasks DROP COLUMN IF EXISTS batch_id;
