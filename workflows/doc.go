// Package workflows holds courier's Temporal workflows: durable control flow only (timers,
// retries, the order of activities). Workflows are deterministic; they import the activities'
// contract (activities/contract: names, params, results, error types), never the activities
// themselves, the store, the message queue or net/http (deps_test.go checks it).
package workflows
