ALTER TABLE courier_outbox DROP COLUMN workflow_id;
