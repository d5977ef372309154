// Package otelsetup turns tracing on from the standard OpenTelemetry environment variables: an
// OTLP exporter (gRPC or HTTP/protobuf), the service's resource (service.name courier unless
// OTEL_SERVICE_NAME says otherwise) and the W3C tracecontext propagator, installed as
// OpenTelemetry's globals; and it builds Temporal's tracing interceptor. Only commands import
// it: it pulls in the SDK and the exporters, which producers using outbox never need.
package otelsetup
