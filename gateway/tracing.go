package gateway

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier/tracing"
)

// untraced are the probe and scrape routes: a span per probe would bury the traces that matter.
var untraced = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// traceRequests gives every API request a server span named by its route ("POST
// /v1/tasks/:task_id/versions/:version/result"), continuing the caller's W3C traceparent when it
// sends one (a producer's request, a task worker's result or heartbeat call), and puts the
// path's business ids on the span and on every log line of the request. Handlers then see the
// span in the request's context: what they write (outbox rows, tasks, timers) carries it.
func traceRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		if untraced[route] {
			return next(c)
		}
		req := c.Request()
		ctx := tracing.ExtractHTTP(req.Context(), req.Header)
		attrs := []attribute.KeyValue{
			attribute.String("http.request.method", req.Method),
			attribute.String("http.route", route),
		}
		var ids []slog.Attr
		for i, name := range c.ParamNames() {
			if i < len(c.ParamValues()) {
				v := c.ParamValues()[i]
				attrs = append(attrs, attribute.String("courier."+name, v))
				ids = append(ids, slog.String(name, v))
			}
		}
		ctx, span := tracing.Tracer().Start(ctx, req.Method+" "+route,
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		if len(ids) > 0 {
			ctx = tracing.WithLogAttrs(ctx, ids...)
		}
		c.SetRequest(req.WithContext(ctx))
		err := next(c)
		if err != nil {
			// Render the error now (the error handler skips a committed response), so the span
			// records the status the caller gets.
			c.Error(err)
		}
		status := c.Response().Status
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= http.StatusInternalServerError {
			msg := http.StatusText(status)
			if err != nil {
				msg = err.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
		return nil
	}
}
