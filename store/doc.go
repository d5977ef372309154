// Package store is courier's persistence: bun models and queries that run unchanged on
// PostgreSQL (lib/pq) and SQLite (pure-Go modernc driver). Every status change is one
// transaction, guarded by the status it expects, so concurrent writers never overwrite each
// other's work. The producers' INSERT is in the driver-free subpackage outboxsql, so the
// outbox helper can share it without linking the drivers.
package store
