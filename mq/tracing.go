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

// PublishBatch keeps the wrapped adapter's own batch publish (PublishAll falls back to
// concurrent publishes without it), with a producer span per message as Publish has. A batch
// carries records of many producers' traces, so each message's span continues the trace its
// row's headers carry, and links to the caller's span (the batch activity) so the batch is
// found from any of its records; a row without a trace continues the caller's. The message
// then carries its span's traceparent.
func (t traced) PublishBatch(ctx context.Context, msgs []Message) []error {
	spans := make([]trace.Span, len(msgs))
	out := make([]Message, len(msgs))
	caller := tracing.FromContext(ctx)
	for i, m := range msgs {
		own := tracing.FromHeaders(m.Headers)
		mctx := tracing.ContextWith(ctx, own)
		mctx, spans[i] = tracing.Start(mctx, "publish "+m.Topic, trace.SpanKindProducer,
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.message.id", m.ID),
			attribute.Int("messaging.batch.message_count", len(msgs)),
		)
		if tracing.SpanContext(own).IsValid() {
			tracing.Link(mctx, caller)
		}
		m.Headers = tracing.WithHeaders(mctx, m.Headers)
		out[i] = m
	}
	errs := PublishAll(ctx, t.Publisher, out)
	for i, s := range spans {
		tracing.End(s, errs[i])
	}
	return errs
}
