-- The task workflow code version of the current attempt's run, recorded by its push with
-- run_id: the gateway records a version-5 attempt's result in the row before it hands it to the
-- run, and completes older ones' activity (docs/decisions.md, Tasks). 0: pushed before it was
-- recorded.
ALTER TABLE courier_tasks ADD COLUMN code_version INTEGER NOT NULL DEFAULT 0;
