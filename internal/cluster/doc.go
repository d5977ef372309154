// Package cluster runs courier's production topology on one machine, from source: Temporal
// built from the module courier pins, as separate frontend, history, matching and worker
// processes on a private PostgreSQL (persistence and visibility), the Temporal UI, NATS, and
// courier's migrate, workers and gateways as processes of their own on a second private
// PostgreSQL. `make cluster` (cmd/courier-cluster) starts it for people; the fault test starts
// the same topology and kills its processes one by one. StartPrivatePostgres gives other fault
// tests (cmd/courier's TestBatchedQueueUnderFaults) a PostgreSQL server of their own to restart.
package cluster
