package courier

import "time"

// RetryPolicy is a retry budget with exponential backoff: the one shape of every retry policy
// in courier — a queue's retries of its tasks' attempts, an outbox record's delivery budget,
// a business type's timer deliveries, and the budgets the workflows give Temporal for their
// activities. The outbox budget is carried in workflow inputs, so the field names are in
// recorded histories: never rename them. Which zero fields take which defaults is the user's
// to say (Queue.WithDefaults, workflows.OutboxRetry).
type RetryPolicy struct {
	InitialInterval time.Duration // the wait after the first attempt
	BackoffCoef     float64       // growth of the wait per attempt
	MaxInterval     time.Duration // cap on one wait
	MaxAttempts     int           // attempts in all, including the first; 0 in a Temporal policy: no cap
	// AttemptTimeout bounds one attempt where its user says so (an outbox delivery's load,
	// publish and mark sent); the other users set their timeouts elsewhere and leave it zero.
	AttemptTimeout time.Duration
}

// Delay is the wait before the attempt after attempt n (n ≥ 1) failed.
func (r RetryPolicy) Delay(n int) time.Duration {
	d := float64(r.InitialInterval)
	for i := 1; i < n && d < float64(r.MaxInterval); i++ {
		d *= r.BackoffCoef
	}
	if d > float64(r.MaxInterval) {
		d = float64(r.MaxInterval)
	}
	return time.Duration(d)
}
