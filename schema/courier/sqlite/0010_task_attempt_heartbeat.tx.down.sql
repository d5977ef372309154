ALTER TABLE courier_tasks ADD COLUMN code_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE courier_tasks DROP COLUMN heartbeat_timeout_ms;
