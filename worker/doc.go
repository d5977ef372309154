// Package worker runs courier's background side in one process: the Temporal worker with
// courier's workflows and activities registered, and the outbox relay. It is stateless; run any
// number.
package worker
