-- Timers of their own keep a row too (docs/timers.md, docs/decisions.md "Timers and schedules"):
-- courier's database decides their cancel and reschedule, and their run follows the row. mode
-- says which delivers a row: its bucket (bucketed) or its own run (workflow).
ALTER TABLE courier_timers ADD COLUMN mode TEXT NOT NULL DEFAULT 'bucketed'
    CHECK (mode IN ('workflow', 'bucketed'));
