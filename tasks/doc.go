// Package tasks is the prioritized-task service: the API side (insert with the version rules,
// results, heartbeats, cancel, queues) and the claimers that move pending tasks into their
// attempt workflows within each queue's concurrency limit.
package tasks
