-- Task queues: configuration (JSON, defaults applied on read) plus the limiter row. in_flight
-- counts the queue's tasks in Processing; it changes in the same transaction as their statuses.
CREATE TABLE IF NOT EXISTS courier_task_queues (
    name              TEXT PRIMARY KEY,
    config            TEXT    NOT NULL DEFAULT '{}',
    concurrency_limit INTEGER NOT NULL CHECK (concurrency_limit > 0),
    in_flight         INTEGER NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO courier_task_queues (name, concurrency_limit) VALUES ('default', 10) ON CONFLICT DO NOTHING;

-- The highest version ever accepted per task_id; it outlives the task rows, so a stale request
-- can never come back after a purge.
CREATE TABLE IF NOT EXISTS courier_task_heads (
    task_id     TEXT PRIMARY KEY,
    max_version BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS courier_tasks (
    task_id         TEXT     NOT NULL,
    version         BIGINT   NOT NULL CHECK (version >= 1),
    queue           TEXT     NOT NULL,
    priority        SMALLINT NOT NULL CHECK (priority BETWEEN 1 AND 5),
    status          TEXT     NOT NULL CHECK (status IN
                    ('pending', 'processing', 'success', 'failed', 'stopped', 'superseded', 'cancelled')),
    payload         TEXT     NOT NULL,
    overrides       TEXT     NOT NULL DEFAULT '{}',
    attempt         INTEGER  NOT NULL DEFAULT 0,
    attempt_base    INTEGER  NOT NULL DEFAULT 0,
    result          TEXT,
    status_code     INTEGER  NOT NULL DEFAULT 0,
    message         TEXT     NOT NULL DEFAULT '',
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at      TIMESTAMPTZ,
    claimed_at      TIMESTAMPTZ,
    pushed_at       TIMESTAMPTZ,
    deadline_at     TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, version)
);
CREATE INDEX IF NOT EXISTS courier_tasks_ready_idx
    ON courier_tasks (queue, priority, version DESC, created_at) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS courier_tasks_status_idx ON courier_tasks (queue, status, updated_at);
-- Attempts past their processing deadline, for the sweeper's check of their workflows.
CREATE INDEX IF NOT EXISTS courier_tasks_deadline_idx ON courier_tasks (deadline_at) WHERE status = 'processing';
