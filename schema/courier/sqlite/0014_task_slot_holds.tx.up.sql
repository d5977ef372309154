-- A slot freed by a worker's result is held until the worker has been answered
-- (docs/tasks.md, "The limit as a worker counts it"): one row per answer and queue, holding as
-- many slots as that answer's results freed, counted in the queue's in_flight with the rows in
-- Processing; deleted (and the count lowered) once the answer is written, or after a grace by
-- any claimer if the gateway died first.
CREATE TABLE IF NOT EXISTS courier_task_slot_holds (
    hold_id  TEXT        NOT NULL,
    queue    TEXT        NOT NULL,
    slots    INTEGER     NOT NULL CHECK (slots > 0),
    held_at  TEXT        NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    PRIMARY KEY (hold_id, queue)
);
CREATE INDEX IF NOT EXISTS courier_task_slot_holds_age_idx ON courier_task_slot_holds (held_at);
