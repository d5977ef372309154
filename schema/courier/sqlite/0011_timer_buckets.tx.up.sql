-- Bucketed timers (docs/timers.md, "Bucketed mode"): a business type may keep its timers as
-- rows here, delivered by one workflow per type and second instead of one workflow per timer.
ALTER TABLE courier_biz_types ADD COLUMN timer_mode TEXT NOT NULL DEFAULT 'workflow'
    CHECK (timer_mode IN ('workflow', 'bucketed'));
-- How long a bucketed timer's row is kept once it is delivered, failed or cancelled.
ALTER TABLE courier_biz_types ADD COLUMN timer_retention_ms INTEGER NOT NULL DEFAULT 0;
-- Where a signed event goes when one of the type's timers fails for good: a URL or a topic.
ALTER TABLE courier_biz_types ADD COLUMN failure_url TEXT NOT NULL DEFAULT '';
ALTER TABLE courier_biz_types ADD COLUMN failure_topic TEXT NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS courier_timers (
    biz_type     TEXT NOT NULL,
    biz_id       TEXT NOT NULL,
    fire_at      TEXT NOT NULL,
    -- the Unix second of fire_at: the bucket whose workflow delivers the timer
    bucket       INTEGER      NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('scheduled', 'firing', 'delivered', 'failed', 'cancelled')),
    payload      TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    version      INTEGER     NOT NULL DEFAULT 0,
    attempts     INTEGER     NOT NULL DEFAULT 0,
    last_error   TEXT NOT NULL DEFAULT '',
    -- the bucket delivery that claimed the row (NULL once it is done with it)
    claim        TEXT,
    delivery_id  TEXT NOT NULL DEFAULT '',
    traceparent  TEXT,
    tracestate   TEXT,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    updated_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    finished_at  TEXT,
    PRIMARY KEY (biz_type, biz_id)
);
CREATE INDEX IF NOT EXISTS courier_timers_due_idx ON courier_timers (biz_type, bucket, fire_at) WHERE state = 'scheduled';
CREATE INDEX IF NOT EXISTS courier_timers_claim_idx ON courier_timers (claim) WHERE claim IS NOT NULL;
CREATE INDEX IF NOT EXISTS courier_timers_state_idx ON courier_timers (state, fire_at);
CREATE INDEX IF NOT EXISTS courier_timers_list_idx ON courier_timers (biz_type, created_at);

-- Token buckets shared by every worker (a business type's delivery rate in bucketed mode, a
-- queue's dispatch rate): tokens as of updated_at, refilled at the caller's rate.
CREATE TABLE IF NOT EXISTS courier_rate_limits (
    name       TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))
);
