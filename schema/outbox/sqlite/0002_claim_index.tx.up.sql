-- Claims take pending rows and dispatched rows whose lease ran out, ordered by due time: index
-- exactly that, so a claim costs O(batch), not O(backlog).
DROP INDEX IF EXISTS courier_outbox_pending_idx;
CREATE INDEX IF NOT EXISTS courier_outbox_due_idx
    ON courier_outbox (next_attempt_at, id) WHERE status IN ('pending', 'dispatched');
