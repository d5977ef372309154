DROP TABLE IF EXISTS courier_pause_changes;
