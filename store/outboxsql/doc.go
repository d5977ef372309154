// Package outboxsql holds the INSERT that writes courier_outbox rows, for the producer helper
// (outbox.Enqueue, and through it the store's publish endpoint): multi-row statements with the
// placeholders of the caller's handle, split within the databases' limits. It imports no
// database driver and nothing else of the store, so producers that link the outbox helper link
// only database/sql and bun's core.
package outboxsql
