// Package health is the contract of courier's liveness and readiness: a Check names one
// dependency and probes it, a Loop records the passes of a periodic loop (the outbox relay, the
// task claimer) and says when it is stale or wedged, and Evaluate turns checks into the report
// /readyz serves. It does no I/O of its own: the probes are the callers'.
package health
