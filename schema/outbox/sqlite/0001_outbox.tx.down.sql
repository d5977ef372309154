DROP TABLE IF EXISTS courier_outbox;
