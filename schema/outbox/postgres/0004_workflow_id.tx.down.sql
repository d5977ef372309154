ALTER TABLE courier_outbox DROP COLUMN IF EXISTS workflow_id;
