package mq_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/tracing"
)

// batchBroker is an adapter with a batch publish of its own; it records how it was called.
type batchBroker struct {
	fakeBroker
	batches [][]mq.Message
}

func (b *batchBroker) PublishBatch(_ context.Context, msgs []mq.Message) []error {
	b.batches = append(b.batches, msgs)
	return make([]error, len(msgs))
}

// A traced adapter keeps its batch publish (the batch mode's speed on NATS depends on it), and
// each message of the batch continues the trace its row carried, or the caller's when it
// carried none, with a producer span of its own.
func TestTracedKeepsTheBatchPublish(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	producer := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	b := &batchBroker{}
	ctx, caller := tracing.Start(t.Context(), "batch activity", 0)
	msgs := []mq.Message{
		{ID: "o-1", Topic: "orders.created", Headers: map[string]string{courier.HeaderTraceParent: producer, "x": "1"}},
		{ID: "o-2", Topic: "orders.paid"},
	}

	errs := mq.PublishAll(ctx, mq.Traced(b), msgs)
	caller.End()

	require.Equal(t, []error{nil, nil}, errs)
	require.Len(t, b.batches, 1, "one batch publish, not a publish per message")
	got := b.batches[0]
	require.Len(t, got, 2)
	first := tracing.SpanContext(tracing.FromHeaders(got[0].Headers))
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", first.TraceID().String(), "the row's producer trace continues")
	require.NotEqual(t, "b7ad6b7169203331", first.SpanID().String(), "under the publish span")
	require.Equal(t, "1", got[0].Headers["x"], "the row's other headers are kept")
	second := tracing.SpanContext(tracing.FromHeaders(got[1].Headers))
	require.Equal(t, caller.SpanContext().TraceID(), second.TraceID(), "a row without a trace continues the caller's")
	var publishes []string
	links := map[string][]trace.SpanContext{}
	for _, s := range exp.GetSpans() {
		if s.Name == "batch activity" {
			continue
		}
		publishes = append(publishes, s.Name)
		for _, l := range s.Links {
			links[s.Name] = append(links[s.Name], l.SpanContext)
		}
	}
	require.ElementsMatch(t, []string{"publish orders.created", "publish orders.paid"}, publishes)
	require.Len(t, links["publish orders.created"], 1, "a message in another trace links to the batch activity")
	require.Equal(t, caller.SpanContext().SpanID(), links["publish orders.created"][0].SpanID())
	require.Equal(t, caller.SpanContext().TraceID(), links["publish orders.created"][0].TraceID())
	require.Empty(t, links["publish orders.paid"], "a message in the caller's trace is its child already")
	require.Equal(t, producer, msgs[0].Headers[courier.HeaderTraceParent], "the caller's messages are not changed")
}
