-- The task workflow code version of the current attempt's run, recorded by its push with
-- run_id: the gateway hands a worker's result to a version-5 run as a signal, to older ones by
-- completing their activity (docs/decisions.md, Tasks). 0: pushed before it was recorded.
ALTER TABLE courier_tasks ADD COLUMN code_version INTEGER NOT NULL DEFAULT 0;
