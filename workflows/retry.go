package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
)

// RetryPolicy is a serialisable retry budget with exponential backoff: the one shape of every
// retry policy the workflows give Temporal for their activities, and of the outbox budget the
// relay passes in OutboxDeliveryParams (so its field names are in recorded histories). Which
// errors must not be retried depends on the activity, so Temporal takes them as a parameter.
// Zero fields are Temporal's own defaults (no cap on attempts); WithDefaults fills them with
// the outbox's instead.
type RetryPolicy struct {
	InitialInterval time.Duration // first wait; outbox default 1 s
	BackoffCoef     float64       // growth per attempt; outbox default 2
	MaxInterval     time.Duration // cap on one wait; outbox default 5 min
	MaxAttempts     int32         // attempts in all, including the first; outbox default 20
	// AttemptTimeout bounds one outbox attempt (load, publish, mark sent); after a worker crash
	// the attempt is retried elsewhere once it passes. Outbox default 30 s. Temporal ignores
	// it: the other activities' options say their own timeouts.
	AttemptTimeout time.Duration
}

// Temporal is the policy as an activity's options take it; nonRetryable are the application
// error types of that activity that no retry can fix (nil when there are none).
func (r RetryPolicy) Temporal(nonRetryable ...string) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:        r.InitialInterval,
		BackoffCoefficient:     r.BackoffCoef,
		MaximumInterval:        r.MaxInterval,
		MaximumAttempts:        r.MaxAttempts,
		NonRetryableErrorTypes: slices.Clone(nonRetryable), // the callers' lists stay theirs
	}
}

// firstAttempt is the budget's first attempt alone, with its first backoff (what an attempt
// reports as its next retry time).
func (r RetryPolicy) firstAttempt() RetryPolicy {
	r.MaxAttempts = 1
	return r
}

// firstBackoff is the budget's wait after its first attempt (with its defaults applied), as
// Temporal computes it: the initial interval, capped at the longest wait.
func (r RetryPolicy) firstBackoff() time.Duration {
	return min(r.InitialInterval, r.MaxInterval)
}

// afterFirst is what is left of a budget (with its defaults applied) once its first attempt
// and the backoff after it are spent: one attempt fewer, each backoff the one the budget gives
// an attempt later (capped at the longest wait, as Temporal caps them, also when a huge
// coefficient overflows).
func (r RetryPolicy) afterFirst() RetryPolicy {
	next := time.Duration(float64(r.InitialInterval) * r.BackoffCoef)
	if next <= 0 || next > r.MaxInterval {
		next = r.MaxInterval
	}
	r.InitialInterval = next
	if r.MaxAttempts > 1 {
		r.MaxAttempts--
	}
	return r
}

// untilDone retries a bookkeeping activity (recording an outcome, marking a record dead,
// reading a business type) until the database answers: from 1 s doubling to a minute, with
// no cap on attempts, so no row is left in limbo because a write failed once.
var untilDone = RetryPolicy{InitialInterval: time.Second, BackoffCoef: 2, MaxInterval: time.Minute}

// once runs an activity a single time: its failure is the workflow's to classify.
var once = RetryPolicy{MaxAttempts: 1}
