// Package tracing is courier's OpenTelemetry vocabulary: the W3C tracecontext propagator, the
// trace context carried in rows, headers and HTTP requests, courier's spans, and a slog handler
// that stamps log records with trace, span and business ids. It uses only the OpenTelemetry
// API and the global provider, so it costs nothing until tracing/otelsetup installs an
// exporting provider (docs/tracing.md); producers' processes can import it through outbox.
package tracing
