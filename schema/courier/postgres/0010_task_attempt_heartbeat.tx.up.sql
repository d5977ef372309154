-- The current attempt's heartbeat timeout in milliseconds, recorded by its push with run_id
-- (0: none): an attempt with one waits for its result in an activity the gateway completes by
-- its id, one without takes it as an update (docs/decisions.md, Tasks). It replaces
-- code_version (0008), which named the task workflow code version of pre-release builds.
ALTER TABLE courier_tasks ADD COLUMN heartbeat_timeout_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE courier_tasks DROP COLUMN code_version;
