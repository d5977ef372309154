DROP TABLE IF EXISTS courier_pauses;
