package tracing

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
)

const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func spanCtx(t *testing.T) context.Context {
	tc := courier.TraceContext{Parent: parent, State: "vendor=1"}
	ctx := ContextWith(context.Background(), tc)
	require.True(t, trace.SpanContextFromContext(ctx).IsValid())
	return ctx
}

func TestTraceContextRoundTrip(t *testing.T) {
	ctx := spanCtx(t)
	require.Equal(t, courier.TraceContext{Parent: parent, State: "vendor=1"}, FromContext(ctx))
	require.True(t, FromContext(context.Background()).IsZero())
	require.False(t, SpanContext(courier.TraceContext{Parent: "garbage"}).IsValid())
	require.Equal(t, context.Background(), ContextWith(context.Background(), courier.TraceContext{}))

	h := http.Header{}
	InjectHTTP(ctx, h)
	require.Equal(t, parent, h.Get("traceparent"))
	require.Equal(t, parent, FromContext(ExtractHTTP(context.Background(), h)).Parent)
}

func TestHeaders(t *testing.T) {
	ctx := spanCtx(t)
	require.Equal(t, courier.TraceContext{Parent: "p", State: "s"}, FromHeaders(map[string]string{"Traceparent": "p", "TRACESTATE": "s", "x": "y"}))

	in := map[string]string{"Traceparent": "old", "x-app": "a"}
	out := WithHeaders(ctx, in)
	require.Equal(t, map[string]string{"traceparent": parent, "tracestate": "vendor=1", "x-app": "a"}, out)
	require.Equal(t, "old", in["Traceparent"], "the caller's map is left alone")

	require.Equal(t, in, WithHeaders(context.Background(), in), "no span: unchanged")

	full := map[string]string{}
	for i := range courier.MaxHeaders {
		full[fmt.Sprintf("h-%d", i)] = "v"
	}
	require.Equal(t, full, WithHeaders(ctx, full), "no room under the header limit: unchanged")
	require.NoError(t, courier.CheckHeaders("headers", out), "trace headers pass the header rule")
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil)))
	ctx := WithLogAttrs(spanCtx(t), slog.String("task_id", "t-1"), slog.Int64("version", 2))

	log.InfoContext(ctx, "hello")
	line := buf.String()
	require.Contains(t, line, "trace_id=0af7651916cd43dd8448eb211c80319c")
	require.Contains(t, line, "span_id=b7ad6b7169203331")
	require.Contains(t, line, "task_id=t-1")
	require.Contains(t, line, "version=2")

	buf.Reset()
	log.InfoContext(ctx, "explicit", "task_id", "mine")
	require.Equal(t, 1, strings.Count(buf.String(), "task_id="), buf.String())
	require.Contains(t, buf.String(), "task_id=mine")

	buf.Reset()
	log.Info("no context")
	require.NotContains(t, buf.String(), "trace_id")

	// Temporal's tracing interceptor adds TraceID and SpanID to the SDK's loggers.
	buf.Reset()
	sc := trace.SpanContextFromContext(ctx)
	log.With("TraceID", sc.TraceID(), "SpanID", sc.SpanID()).InfoContext(ctx, "sdk")
	require.Equal(t, 1, strings.Count(buf.String(), "trace_id="), buf.String())
	require.NotContains(t, buf.String(), "TraceID")
}
