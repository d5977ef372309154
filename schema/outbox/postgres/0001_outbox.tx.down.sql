DROP TRIGGER IF EXISTS courier_outbox_notify ON courier_outbox;
DROP FUNCTION IF EXISTS courier_outbox_notify();
DROP TABLE IF EXISTS courier_outbox;
