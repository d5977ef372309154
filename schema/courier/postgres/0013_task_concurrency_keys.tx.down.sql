DROP INDEX IF EXISTS courier_tasks_key_ready_idx;
ALTER TABLE courier_tasks DROP COLUMN IF EXISTS concurrency_key;
