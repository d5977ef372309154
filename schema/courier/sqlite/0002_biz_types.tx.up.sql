CREATE TABLE IF NOT EXISTS courier_biz_types (
    name                  TEXT PRIMARY KEY,
    delivery              TEXT NOT NULL CHECK (delivery IN ('http', 'mq')),
    callback_url          TEXT NOT NULL DEFAULT '',
    secrets               TEXT NOT NULL DEFAULT '[]',
    topic                 TEXT NOT NULL DEFAULT '',
    request_timeout_ms    INTEGER NOT NULL,
    retry_initial_ms      INTEGER NOT NULL,
    retry_backoff         REAL NOT NULL,
    retry_max_ms          INTEGER NOT NULL,
    max_attempts          INTEGER NOT NULL,
    rate_limit_per_second REAL NOT NULL DEFAULT 0,
    allow_private         INTEGER NOT NULL DEFAULT 0,
    created_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    updated_at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))
);
