package tracing

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
)

// ScopeName is the instrumentation scope of courier's own spans.
const ScopeName = "github.com/courier-oss/courier"

// Propagator is the one propagator courier uses everywhere: W3C tracecontext (traceparent and
// tracestate), whatever the global one is.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Tracer returns courier's tracer from the global provider: a no-op until a provider is
// installed (tracing/otelsetup does, from the OTEL_* variables).
func Tracer() trace.Tracer { return otel.GetTracerProvider().Tracer(ScopeName) }

// Start starts a span of courier's under ctx's span (or as a root).
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// FromContext returns the trace context of ctx's span, zero when ctx has none.
func FromContext(ctx context.Context) courier.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return courier.TraceContext{}
	}
	c := propagation.MapCarrier{}
	Propagator.Inject(ctx, c)
	return courier.TraceContext{Parent: c[courier.HeaderTraceParent], State: c[courier.HeaderTraceState]}
}

// ContextWith returns ctx with tc as its remote parent span; ctx unchanged when tc is zero or
// does not parse.
func ContextWith(ctx context.Context, tc courier.TraceContext) context.Context {
	if tc.IsZero() {
		return ctx
	}
	c := propagation.MapCarrier{courier.HeaderTraceParent: tc.Parent}
	if tc.State != "" {
		c[courier.HeaderTraceState] = tc.State
	}
	return Propagator.Extract(ctx, c)
}

// SpanContext parses tc; the result is invalid when tc is zero or malformed.
func SpanContext(tc courier.TraceContext) trace.SpanContext {
	return trace.SpanContextFromContext(ContextWith(context.Background(), tc))
}

// Link adds a link from ctx's span to the span tc names (a span of another request that this
// one depends on, such as the worker's result call an attempt records). Nothing when either is
// missing.
func Link(ctx context.Context, tc courier.TraceContext, attrs ...attribute.KeyValue) {
	sc := SpanContext(tc)
	if !sc.IsValid() {
		return
	}
	trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: sc, Attributes: attrs})
}

// FromHeaders reads the trace context from message or row headers, matching the names in any
// case (header maps written by hand may say Traceparent).
func FromHeaders(headers map[string]string) courier.TraceContext {
	var tc courier.TraceContext
	for k, v := range headers {
		switch {
		case strings.EqualFold(k, courier.HeaderTraceParent):
			tc.Parent = v
		case strings.EqualFold(k, courier.HeaderTraceState):
			tc.State = v
		}
	}
	return tc
}

// WithHeaders returns a copy of headers carrying ctx's trace context, replacing any trace
// context they had (under any spelling of the names). Without a span in ctx, or when the trace
// context would take the headers past courier's header rule (courier.CheckHeaders: at most
// MaxHeaders of them), it returns headers as they are: the message matters more than its trace.
func WithHeaders(ctx context.Context, headers map[string]string) map[string]string {
	tc := FromContext(ctx)
	if tc.IsZero() {
		return headers
	}
	out := make(map[string]string, len(headers)+2)
	for k, v := range headers {
		if strings.EqualFold(k, courier.HeaderTraceParent) || strings.EqualFold(k, courier.HeaderTraceState) {
			continue
		}
		out[k] = v
	}
	out[courier.HeaderTraceParent] = tc.Parent
	if tc.State != "" {
		out[courier.HeaderTraceState] = tc.State
	}
	if courier.CheckHeaders("headers", out) != nil {
		return headers
	}
	return out
}

// InjectHTTP sets traceparent (and tracestate) on an outgoing request's headers from ctx.
func InjectHTTP(ctx context.Context, h http.Header) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// ExtractHTTP returns ctx with the remote parent an incoming request's traceparent names.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return Propagator.Extract(ctx, propagation.HeaderCarrier(h))
}
