// Package contract is what courier's workflows and activities agree on: the activities'
// registered names, their params and result structs, and the error types they raise (the task
// queues they run on are in the table of workflow kinds, courier's kinds.go). It holds no implementation and does no I/O, so workflows import it
// instead of the activities package (whose adapters link the store, the message queue and
// HTTP clients); the activities implement it. The names and the JSON shapes of these structs
// are in recorded workflow histories: they never change.
package contract
