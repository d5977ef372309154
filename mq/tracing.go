package mq

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier/tracing"
)

// Traced wraps p so that every publish is a producer span ("publish <topic>") under the
// caller's span, and the message carries that span's W3C traceparent (and tracestate) as
// headers, replacing any the outbox row had: a consumer that continues it joins the item's
// trace right after the publish (docs/tracing.md). Without an installed tracer provider the
// span records nothing and the message carries the caller's trace context, if any.
func Traced(p Publisher) Publisher {
	if p == nil {
		return nil
	}
	if _, ok := p.(traced); ok {
		return p
	}
	return traced{p}
}

type traced struct{ Publisher }

func (t traced) Publish(ctx context.Context, m Message) (err error) {
	ctx, span := tracing.Start(ctx, "publish "+m.Topic, trace.SpanKindProducer,
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", m.Topic),
		attribute.String("messaging.message.id", m.ID),
	)
	defer func() { tracing.End(span, err) }()
	m.Headers = tracing.WithHeaders(ctx, m.Headers)
	return t.Publisher.Publish(ctx, m)
}
