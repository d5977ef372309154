DROP TABLE IF EXISTS courier_settings;
