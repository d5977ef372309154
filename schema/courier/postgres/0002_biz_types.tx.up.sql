CREATE TABLE IF NOT EXISTS courier_biz_types (
    name                  TEXT PRIMARY KEY,
    delivery              TEXT NOT NULL CHECK (delivery IN ('http', 'mq')),
    callback_url          TEXT NOT NULL DEFAULT '',
    secrets               TEXT NOT NULL DEFAULT '[]',
    topic                 TEXT NOT NULL DEFAULT '',
    request_timeout_ms    BIGINT NOT NULL,
    retry_initial_ms      BIGINT NOT NULL,
    retry_backoff         DOUBLE PRECISION NOT NULL,
    retry_max_ms          BIGINT NOT NULL,
    max_attempts          INTEGER NOT NULL,
    rate_limit_per_second DOUBLE PRECISION NOT NULL DEFAULT 0,
    allow_private         BOOLEAN NOT NULL DEFAULT false,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at            TIMESTAMPTZ NOT NULL DEFAULT now()
);
