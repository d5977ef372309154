package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/courier-oss/courier/tracing"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME (or service.name in
// OTEL_RESOURCE_ATTRIBUTES) sets another.
const DefaultServiceName = "courier"

// Protocols OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) may name.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf" // the default, as the OpenTelemetry specification says
)

// Settings are what the environment asks for.
type Settings struct {
	Enabled  bool   // an OTLP endpoint is set and nothing turns tracing off
	Protocol string // ProtocolGRPC or ProtocolHTTPProtobuf
	Endpoint string // as given (the exporter reads it, and the rest of OTEL_EXPORTER_OTLP_*, itself)
	Reason   string // why tracing is off, for the log
}

// FromEnv reads the settings: tracing is on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT is set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
// An OTEL_TRACES_EXPORTER other than otlp or none, or a protocol other than grpc and
// http/protobuf, is an error.
func FromEnv(getenv func(string) string) (Settings, error) {
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return Settings{Reason: "OTEL_SDK_DISABLED=true"}, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return Settings{Reason: "OTEL_TRACES_EXPORTER=none"}, nil
	default:
		return Settings{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%s is not supported (otlp or none)", exp)
	}
	s := Settings{Endpoint: get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")}
	if s.Endpoint == "" {
		s.Endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if s.Endpoint == "" {
		return Settings{Reason: "no OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}, nil
	}
	s.Protocol = strings.ToLower(get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if s.Protocol == "" {
		s.Protocol = strings.ToLower(get("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch s.Protocol {
	case "":
		s.Protocol = ProtocolHTTPProtobuf
	case ProtocolGRPC, ProtocolHTTPProtobuf:
	default:
		return Settings{}, fmt.Errorf("OTLP protocol %q is not supported (grpc or http/protobuf)", s.Protocol)
	}
	s.Enabled = true
	return s, nil
}

// Start installs an exporting tracer provider and the W3C propagator as OpenTelemetry's
// globals when the process environment asks for tracing (FromEnv; the exporter reads the rest
// of OTEL_EXPORTER_OTLP_*: headers, timeout, TLS, insecure), and returns a shutdown that
// flushes the spans still buffered (call it last, with a deadline). When it does not, Start
// installs nothing and the shutdown does nothing.
func Start(ctx context.Context) (Settings, func(context.Context) error, error) {
	noop := func(context.Context) error { return nil }
	s, err := FromEnv(os.Getenv)
	if err != nil || !s.Enabled {
		return s, noop, err
	}
	var exp sdktrace.SpanExporter
	if s.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return s, noop, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return s, noop, fmt.Errorf("trace resource: %w", err)
	}
	// Sampling follows OTEL_TRACES_SAMPLER (default: parent-based, always on).
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(tracing.Propagator)
	return s, tp.Shutdown, nil
}

// TemporalInterceptor is Temporal's OpenTelemetry interceptor with courier's W3C propagator,
// over the global tracer provider. Set on the client that starts workflows, it traces the
// starts and, on every worker built from that client, the workflow runs and activities: each
// span a child of the one that started it, carried in Temporal's headers.
func TemporalInterceptor() (interceptor.Interceptor, error) {
	return temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
		TextMapPropagator: tracing.Propagator,
		// Queries are reads (the timer and task APIs ask often); they would only add noise.
		DisableQueryTracing: true,
		// A header that does not parse must never fail a workflow task: the run goes on
		// without a parent.
		AllowInvalidParentSpans: true,
	})
}
