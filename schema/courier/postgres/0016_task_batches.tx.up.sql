-- The batched dispatch mode (docs/tasks.md, "Dispatch modes"): the batch run that pushes an
-- attempt (its workflow id; NULL for an attempt with a run of its own) and the moment the
-- attempt times out unless its result or a heartbeat comes first (the processing deadline, or
-- the last heartbeat plus the heartbeat timeout, whichever is sooner), checked every second by
-- the claimers. The index holds only attempts in Processing that have such a moment.
ALTER TABLE courier_tasks ADD COLUMN batch_id TEXT;
ALTER TABLE courier_tasks ADD COLUMN timeout_at TIMESTAMPTZ;
CREATE INDEX courier_tasks_timeout_idx ON courier_tasks (timeout_at) WHERE status = 'processing' AND timeout_at IS NOT NULL;
