-- Flow control (docs/flow-control.md): a task's concurrency key (a tenant, a customer), for its
-- queue's per-key limit and turns; '' for none. The index feeds a keyed queue's claim: the
-- ready tasks of one band, key by key, each key's in claim order.
ALTER TABLE courier_tasks ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';
CREATE INDEX courier_tasks_key_ready_idx
    ON courier_tasks (queue, priority, concurrency_key, version DESC, created_at) WHERE status = 'pending';
