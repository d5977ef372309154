package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys for the trace context.
const (
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

type logAttrsKey struct{}

// WithLogAttrs returns ctx carrying business ids (outbox_id, task_id, biz_id …) that every
// record logged with ctx through a LogHandler gets, unless the record names them itself.
func WithLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return context.WithValue(ctx, logAttrsKey{}, append(slices.Clip(prev), attrs...))
}

// LogHandler wraps h so that records logged with a context carry trace_id and span_id of the
// context's span and the business ids of WithLogAttrs. It also renames the TraceID and SpanID
// fields Temporal's tracing interceptor adds to the SDK's workflow and activity loggers, so
// every line says trace_id the same way.
func LogHandler(h slog.Handler) slog.Handler { return &logHandler{next: h} }

type logHandler struct {
	next slog.Handler
	// named are the keys already given by WithAttrs, never repeated per record.
	named []string
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	has := func(key string) bool {
		if slices.Contains(h.named, key) {
			return true
		}
		found := false
		r.Attrs(func(a slog.Attr) bool {
			found = a.Key == key
			return !found
		})
		return found
	}
	var add []slog.Attr
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !has(LogTraceID) {
		add = append(add, slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	if ids, _ := ctx.Value(logAttrsKey{}).([]slog.Attr); len(ids) > 0 {
		for _, a := range ids {
			if !has(a.Key) {
				add = append(add, a)
			}
		}
	}
	if len(add) > 0 {
		r = r.Clone()
		r.AddAttrs(add...)
	}
	return h.next.Handle(ctx, r)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	named := slices.Clip(h.named)
	for i, a := range attrs {
		switch a.Key {
		case "TraceID":
			a = slog.String(LogTraceID, fmt.Sprint(a.Value.Any()))
		case "SpanID":
			a = slog.String(LogSpanID, fmt.Sprint(a.Value.Any()))
		}
		out[i] = a
		named = append(named, a.Key)
	}
	return &logHandler{next: h.next.WithAttrs(out), named: named}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	// Keys inside a group never clash with the top-level ones.
	return &logHandler{next: h.next.WithGroup(name)}
}
