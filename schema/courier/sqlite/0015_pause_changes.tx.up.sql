-- How many pauses and resumes were ever committed (one row, id 1; store/pauses.go). A worker's
-- pause watcher reads it with the pauses, so it learns of a pause and its resume even when both
-- fell between two of its reads and left the list as it was: a task claim held by that pause
-- in between is then woken by the resume (docs/flow-control.md).
CREATE TABLE IF NOT EXISTS courier_pause_changes (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    changes INTEGER NOT NULL
);
