-- A slot freed by a worker's result is held until the worker has been answered
-- (docs/tasks.md, "The limit as a worker counts it"): one row per such result, counted in its
-- queue's in_flight with the rows in Processing, deleted (and the count lowered) once the
-- answer is written, or after a grace by any claimer if the gateway died first.
CREATE TABLE IF NOT EXISTS courier_task_slot_holds (
    task_id  TEXT        NOT NULL,
    version  INTEGER     NOT NULL,
    attempt  INTEGER     NOT NULL,
    queue    TEXT        NOT NULL,
    held_at  TEXT        NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    PRIMARY KEY (task_id, version, attempt)
);
CREATE INDEX IF NOT EXISTS courier_task_slot_holds_queue_idx ON courier_task_slot_holds (queue, held_at);
