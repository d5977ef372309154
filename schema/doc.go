// Package schema embeds courier's versioned SQL migrations for PostgreSQL and SQLite and applies
// them with bun's migrator. There are two sets: "outbox" (the outbox table, also installed in
// producers' own databases) and "courier" (everything else courier keeps in its own database).
package schema
