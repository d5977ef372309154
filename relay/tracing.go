package relay

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/tracing"
)

// traceRow starts the relay's span of one row: a child of the trace context the producer wrote
// into the row's headers (a new trace when there is none). The delivery workflow started under
// it (Temporal's tracing interceptor carries it in the workflow's header) and the publish at the
// end of that workflow join the same trace. The row's ids go on the span and on log lines.
func traceRow(ctx context.Context, source string, id int64, topic string, tc courier.TraceContext) (context.Context, trace.Span) {
	ctx = tracing.WithLogAttrs(tracing.ContextWith(ctx, tc), slog.String("source", source), slog.Int64("outbox_id", id))
	return tracing.Start(ctx, "outbox relay", trace.SpanKindConsumer,
		attribute.String("courier.outbox.source", source),
		attribute.Int64("courier.outbox.id", id),
		attribute.String("messaging.destination.name", topic),
	)
}
