-- The W3C trace context of the request that inserted (or last replaced) a task: its attempts'
-- workflows, pushes and results join that trace (docs/tracing.md). NULL: no trace.
ALTER TABLE courier_tasks ADD COLUMN traceparent TEXT;
ALTER TABLE courier_tasks ADD COLUMN tracestate TEXT;
