-- Ordered keys (docs/flow-control.md, "Ordered keys in the outbox").
--
-- commit_seq is the commit order of a keyed record among the records of its key. It is given
-- at COMMIT by a deferred trigger that first takes a transaction lock on the key, held until
-- the commit ends: two transactions writing the same key take their numbers in the order they
-- commit, and a record is visible before the next one of its key is numbered. A record
-- without a key, or committed while the ordered mode was off for this database, has none; the
-- order of those is their id.
ALTER TABLE courier_outbox ADD COLUMN IF NOT EXISTS commit_seq BIGINT;

-- The ordered mode's switch for this database: one row. Off (the default), the trigger below
-- reads it and returns, so producers pay no lock and no UPDATE. A relay whose ordered mode
-- covers this database turns it on at start; only an operator turns it off
-- (docs/flow-control.md, "Turning the commit order on and off"). ordered_topics (a JSON array
-- of topic patterns, NULL for every keyed record) is the union of the relays' ordered topics,
-- and ordered_match the same as one regular expression, which the trigger matches the topic
-- against; both are written by the relays (store.TurnOnCommitOrder), never by hand.
-- ready_after is a transaction id: once every transaction below it has ended, none that read the
-- row before its last change can still commit, and the relays deliver keys (NULL: not known yet).
CREATE TABLE IF NOT EXISTS courier_outbox_settings (
    id             BOOLEAN     PRIMARY KEY DEFAULT true CHECK (id),
    ordered        BOOLEAN     NOT NULL DEFAULT false,
    ordered_topics TEXT,
    ordered_match  TEXT,
    ready_after    BIGINT,
    changed_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO courier_outbox_settings (id) VALUES (true) ON CONFLICT (id) DO NOTHING;

-- The number is taken from the ids' own sequence, at commit: it is above the id of every
-- record inserted before, so COALESCE(commit_seq, id) puts a record numbered after the switch
-- went on after every record committed before it (which have only their id).
CREATE OR REPLACE FUNCTION courier_outbox_commit_seq() RETURNS trigger AS $$
DECLARE
    on_    BOOLEAN;
    match_ TEXT;
BEGIN
    SELECT ordered, ordered_match INTO on_, match_ FROM courier_outbox_settings WHERE id;
    IF NOT COALESCE(on_, false) OR (match_ IS NOT NULL AND NEW.topic !~ match_) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('courier_outbox/' || NEW."key", 0));
    UPDATE courier_outbox SET commit_seq = nextval(pg_get_serial_sequence('courier_outbox', 'id')) WHERE id = NEW.id;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS courier_outbox_commit_seq ON courier_outbox;
CREATE CONSTRAINT TRIGGER courier_outbox_commit_seq
    AFTER INSERT ON courier_outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW."key" <> '')
    EXECUTE FUNCTION courier_outbox_commit_seq();

-- The unsent records of a key, in commit order: a key's next record and whether an earlier
-- one is still unsent.
CREATE INDEX IF NOT EXISTS courier_outbox_key_idx
    ON courier_outbox ("key", (COALESCE(commit_seq, id))) WHERE status IN ('pending', 'dispatched') AND "key" <> '';

-- A key whose next record spent its retry budget: its later records wait until an operator
-- redrives or skips that record.
CREATE TABLE IF NOT EXISTS courier_outbox_blocked_keys (
    "key"      TEXT        PRIMARY KEY,
    record_id  BIGINT      NOT NULL,
    topic      TEXT        NOT NULL,
    reason     TEXT        NOT NULL DEFAULT '',
    blocked_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS courier_outbox_blocked_keys_record_idx ON courier_outbox_blocked_keys (record_id);
