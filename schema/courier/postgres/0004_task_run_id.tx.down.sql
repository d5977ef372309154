ALTER TABLE courier_tasks DROP COLUMN run_id;
