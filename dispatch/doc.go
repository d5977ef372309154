// Package dispatch holds every rule that decides which of a queue's tasks are claimed next: the
// queue's exact concurrency limit, the weighted shares of the priority bands, concurrency keys
// with their per-key limits and turns, the dispatch rate, the pause and the push URL. The rules
// are decided inside one claim transaction that the store opens and runs SQL for (ClaimTx), so
// they hold across every worker; this package does no I/O of its own.
package dispatch
