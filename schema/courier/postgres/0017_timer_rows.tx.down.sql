DELETE FROM courier_timers WHERE mode = 'workflow';
ALTER TABLE courier_timers DROP COLUMN IF EXISTS mode;
