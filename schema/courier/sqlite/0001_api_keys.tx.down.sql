DROP TABLE IF EXISTS courier_api_keys;
