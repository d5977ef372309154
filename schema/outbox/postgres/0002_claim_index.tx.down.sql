DROP INDEX IF EXISTS courier_outbox_due_idx;
CREATE INDEX IF NOT EXISTS courier_outbox_pending_idx
    ON courier_outbox (next_attempt_at, id) WHERE status = 'pending';
