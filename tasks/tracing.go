package tasks

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/tracing"
)

// memoTraceParent names the memo field that shows, in the Temporal UI, the trace an attempt's
// run belongs to (the inserting request's traceparent).
const memoTraceParent = "traceparent"

// traceAttempt starts the claimer's span of one claimed attempt: a child of the trace context
// the inserting request left on the task's row (a new trace when there is none). The attempt's
// workflow is started under it, so the push, the worker's result and the finish join that trace.
// The task's ids go on the span and on log lines.
func traceAttempt(ctx context.Context, t dispatch.Attempt) (context.Context, trace.Span) {
	ctx = tracing.WithLogAttrs(tracing.ContextWith(ctx, t.Trace),
		slog.String("task_id", t.TaskID), slog.Int64("version", t.Version), slog.Int("attempt", t.Attempt))
	return tracing.Start(ctx, "task claim", trace.SpanKindConsumer,
		attribute.String("courier.task_id", t.TaskID),
		attribute.Int64("courier.task_version", t.Version),
		attribute.Int("courier.task_attempt", t.Attempt),
		attribute.String("courier.task_queue", t.Queue),
		attribute.Int("courier.task_priority", t.Priority),
	)
}
