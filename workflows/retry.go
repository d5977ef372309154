package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
)

// The workflows give Temporal their activities' budgets as courier.RetryPolicy values (zero
// fields are Temporal's own defaults: no cap on attempts). Which errors must not be retried
// depends on the activity, so Temporal takes them as a parameter.

// TemporalRetry is the policy r as an activity's options take it; nonRetryable are the
// application error types of that activity that no retry can fix (nil when there are none).
// Temporal has no attempt timeout: the activities' options say their own.
func TemporalRetry(r courier.RetryPolicy, nonRetryable ...string) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{
		InitialInterval:        r.InitialInterval,
		BackoffCoefficient:     r.BackoffCoef,
		MaximumInterval:        r.MaxInterval,
		MaximumAttempts:        int32(r.MaxAttempts),
		NonRetryableErrorTypes: slices.Clone(nonRetryable), // the callers' lists stay theirs
	}
}

// firstAttempt is the budget's first attempt alone, with its first backoff (what an attempt
// reports as its next retry time).
func firstAttempt(r courier.RetryPolicy) courier.RetryPolicy {
	r.MaxAttempts = 1
	return r
}

// firstBackoff is the budget's wait after its first attempt (with its defaults applied), as
// Temporal computes it: the initial interval, capped at the longest wait.
func firstBackoff(r courier.RetryPolicy) time.Duration {
	return min(r.InitialInterval, r.MaxInterval)
}

// afterFirst is what is left of a budget (with its defaults applied) once its first attempt
// and the backoff after it are spent: one attempt fewer, each backoff the one the budget gives
// an attempt later (capped at the longest wait, as Temporal caps them, also when a huge
// coefficient overflows).
func afterFirst(r courier.RetryPolicy) courier.RetryPolicy {
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
var untilDone = courier.RetryPolicy{InitialInterval: time.Second, BackoffCoef: 2, MaxInterval: time.Minute}

// once runs an activity a single time: its failure is the workflow's to classify.
var once = courier.RetryPolicy{MaxAttempts: 1}
