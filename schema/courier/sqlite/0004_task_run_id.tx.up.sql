-- The Temporal run of a task's current attempt, recorded by its push in the same guarded update
-- as pushed_at, so a cancel (and a result) reaches exactly that run and never a later attempt's.
ALTER TABLE courier_tasks ADD COLUMN run_id TEXT;
