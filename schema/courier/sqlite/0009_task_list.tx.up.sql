-- GET /v1/tasks pages newest first by (created_at, task_id, version): the index lets a page
-- read only its rows instead of sorting the whole table.
CREATE INDEX courier_tasks_created ON courier_tasks (created_at, task_id, version);
