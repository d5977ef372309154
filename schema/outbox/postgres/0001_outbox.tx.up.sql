CREATE TABLE IF NOT EXISTS courier_outbox (
    id              BIGSERIAL PRIMARY KEY,
    topic           TEXT        NOT NULL CHECK (topic <> ''),
    "key"           TEXT        NOT NULL DEFAULT '',
    payload         BYTEA       NOT NULL,
    headers         TEXT,
    status          TEXT        NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'dispatched', 'sent', 'dead')),
    attempts        INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at         TIMESTAMPTZ,
    last_error      TEXT
);

CREATE INDEX IF NOT EXISTS courier_outbox_pending_idx
    ON courier_outbox (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS courier_outbox_status_idx ON courier_outbox (status, id);

CREATE OR REPLACE FUNCTION courier_outbox_notify() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('courier_outbox', TG_TABLE_NAME);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS courier_outbox_notify ON courier_outbox;
CREATE TRIGGER courier_outbox_notify
    AFTER INSERT OR UPDATE OF status ON courier_outbox
    FOR EACH ROW WHEN (NEW.status = 'pending')
    EXECUTE FUNCTION courier_outbox_notify();
