-- Timestamps are UTC text in the same layout bun writes ('YYYY-MM-DD HH:MM:SS.ffffff+00:00'),
-- which sorts correctly as text.
CREATE TABLE IF NOT EXISTS courier_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    topic           TEXT    NOT NULL CHECK (topic <> ''),
    "key"           TEXT    NOT NULL DEFAULT '',
    payload         BLOB    NOT NULL,
    headers         TEXT,
    status          TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'dispatched', 'sent', 'dead')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    created_at      TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    sent_at         TEXT,
    last_error      TEXT
);

CREATE INDEX IF NOT EXISTS courier_outbox_pending_idx
    ON courier_outbox (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS courier_outbox_status_idx ON courier_outbox (status, id);
