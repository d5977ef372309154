// Package courier holds the domain vocabulary shared by every other package: the outbox record
// and its statuses, the stable error codes, and the Temporal search attributes courier registers.
// It imports nothing of courier's own, so every layer above can depend on it.
package courier
