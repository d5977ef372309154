package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/interceptor"

	"github.com/courier-oss/courier/tracing/otelsetup"
)

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// startTracing turns OpenTelemetry tracing on when the OTEL_EXPORTER_OTLP_* variables ask for it
// (docs/tracing.md): spans go to the OTLP endpoint, and Temporal's tracing interceptor is set
// on the Temporal client (dialTemporal), so every worker built from it traces too. The spans
// still buffered are flushed when the process closes (the closer runs last).
func (a *app) startTracing(ctx context.Context) error {
	s, shutdown, err := otelsetup.Start(ctx)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	if !s.Enabled {
		a.log.Debug("tracing is off", "reason", s.Reason)
		return nil
	}
	a.closers = append(a.closers, closerFunc(func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return shutdown(sctx)
	}))
	ti, err := otelsetup.TemporalInterceptor()
	if err != nil {
		return fmt.Errorf("tracing: Temporal interceptor: %w", err)
	}
	a.interceptors = []interceptor.ClientInterceptor{ti}
	a.log.Info("tracing is on", "protocol", s.Protocol, "endpoint", s.Endpoint)
	return nil
}
