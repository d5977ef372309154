-- Schedules on the timer wheel (docs/timers.md "Schedules on the wheel"): a schedule of a
-- bucketed business type is a row here, and each of its triggers is a bucketed timer in
-- courier_timers (biz_id <id>@<nominal fire time>), written by the claim of the one before.
CREATE TABLE IF NOT EXISTS courier_schedules (
    id             TEXT        PRIMARY KEY,
    biz_type       TEXT        NOT NULL,
    cron           TEXT        NOT NULL DEFAULT '',
    interval_ms    INTEGER     NOT NULL DEFAULT 0,
    time_zone      TEXT        NOT NULL DEFAULT '',
    jitter_ms      INTEGER     NOT NULL DEFAULT 0,
    catchup_ms     INTEGER     NOT NULL,
    payload        TEXT        NOT NULL,
    spec           TEXT        NOT NULL,
    paused         INTEGER     NOT NULL DEFAULT 0,
    note           TEXT        NOT NULL DEFAULT '',
    -- up with every update, pause and unpause: only a trigger of this version writes the next
    version        INTEGER     NOT NULL DEFAULT 1,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')),
    updated_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))
);
CREATE INDEX IF NOT EXISTS courier_schedules_type_idx ON courier_schedules (biz_type, id);

-- A trigger's schedule and the schedule's version it was written under (0: asked for by hand).
ALTER TABLE courier_timers ADD COLUMN schedule_id TEXT;
ALTER TABLE courier_timers ADD COLUMN schedule_version INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS courier_timers_schedule_idx ON courier_timers (schedule_id, fire_at) WHERE schedule_id IS NOT NULL;
