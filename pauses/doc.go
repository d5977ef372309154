// Package pauses is flow control's pause and resume (docs/flow-control.md): the Service the
// gateway pauses and resumes through, and the Watcher that keeps the pauses in force in each
// worker's memory, so a delivery, a push or a publish checks them without a database read.
package pauses
