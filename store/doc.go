// Package store is courier's persistence: bun models and queries that run unchanged on
// PostgreSQL (lib/pq) and SQLite (pure-Go modernc driver). Every status change is one
// transaction, guarded by the status it expects, so concurrent writers never overwrite each
// other's work.
package store
