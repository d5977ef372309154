// Package workflows holds courier's Temporal workflows: durable control flow only (timers,
// retries, the order of activities). Workflows are deterministic; they import activities for
// names and parameter types, never the store, the message queue or net/http.
package workflows
