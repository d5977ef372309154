// Package integration runs courier end to end in-process against the real components: an
// in-process Temporal server (temporaltest), a real NATS JetStream server, real SQLite and
// PostgreSQL, and real HTTP. It holds tests only.
package integration
