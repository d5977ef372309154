// Package worker runs courier's background side in one process: the Temporal workers, on which
// each component (outbox.go, tasks.go, timers.go) registers its workflows and activities in one
// function of its own, the outbox relay, the task claimer and the business types' delivery
// workers. It is stateless; run any number.
package worker
