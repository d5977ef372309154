-- Flow control (docs/flow-control.md): a task queue, a business type or an outbox topic
-- pattern held by an operator. Work for it is still accepted and kept; workers push, call back
-- and publish nothing of it until the row is deleted.
CREATE TABLE IF NOT EXISTS courier_pauses (
    kind      TEXT NOT NULL CHECK (kind IN ('queue', 'biz_type', 'topic')),
    name      TEXT NOT NULL,
    reason    TEXT NOT NULL DEFAULT '',
    paused_by TEXT NOT NULL DEFAULT '',
    paused_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    PRIMARY KEY (kind, name)
);
