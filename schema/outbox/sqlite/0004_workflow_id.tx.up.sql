-- The workflow that took a record last when it is not the record's own delivery (outbox/<id>):
-- its batch's (outbox-batch/<source>/<first>-<last>, written by the relay before it starts the
-- batch) or its key's (outbox-key/<key>, written by the key's claim). NULL otherwise: the
-- relay's ordinary claim clears it, and a claimed record handed back unstarted has none
-- (docs/outbox.md, "Columns"). The API answers it as the record's workflow_id. Nullable and
-- without a default, so adding it rewrites no rows.
ALTER TABLE courier_outbox ADD COLUMN workflow_id TEXT;
