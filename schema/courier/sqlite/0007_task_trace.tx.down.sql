ALTER TABLE courier_tasks DROP COLUMN tracestate;
ALTER TABLE courier_tasks DROP COLUMN traceparent;
