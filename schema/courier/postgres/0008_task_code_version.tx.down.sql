ALTER TABLE courier_tasks DROP COLUMN code_version;
