package workflows

import (
	"errors"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// ErrTypeOutboxDead is the failure type of a delivery run whose record went dead: the run ends
// Failed with the record's last error as the message, after the row has been marked dead (the
// row stays the source of truth). Its details carry the OutboxDeliveryResult.
const ErrTypeOutboxDead = "OutboxDead"

// DefaultOutboxRetry is the outbox delivery budget when the worker's config sets none: 20
// attempts from 1 s doubling to a 5 min cap, about an hour in all.
var DefaultOutboxRetry = courier.RetryPolicy{
	InitialInterval: time.Second,
	BackoffCoef:     2,
	MaxInterval:     5 * time.Minute,
	MaxAttempts:     20,
	AttemptTimeout:  30 * time.Second,
}

// OutboxRetry is the budget r with its zero fields (and a coefficient under 1) taken from
// DefaultOutboxRetry.
func OutboxRetry(r courier.RetryPolicy) courier.RetryPolicy {
	if r.InitialInterval <= 0 {
		r.InitialInterval = DefaultOutboxRetry.InitialInterval
	}
	if r.BackoffCoef < 1 {
		r.BackoffCoef = DefaultOutboxRetry.BackoffCoef
	}
	if r.MaxInterval <= 0 {
		r.MaxInterval = DefaultOutboxRetry.MaxInterval
	}
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultOutboxRetry.MaxAttempts
	}
	if r.AttemptTimeout <= 0 {
		r.AttemptTimeout = DefaultOutboxRetry.AttemptTimeout
	}
	return r
}

// outboxNonRetryable are the delivery's error types that no retry can fix.
var outboxNonRetryable = []string{contract.ErrTypeUnknownTopic, contract.ErrTypeOutboxNotFound, contract.ErrTypeUnknownSource}

// OutboxDeliveryParams is the delivery workflow's input. The payload stays in the database.
type OutboxDeliveryParams struct {
	Source string
	ID     int64
	Retry  courier.RetryPolicy // the delivery budget; zero fields take DefaultOutboxRetry's
	// FinalState makes the run write "sent" to CourierState before it completes, so the search
	// attribute never goes on saying "dispatched" for a sent record (it costs one event). Runs
	// started before it existed (recorded histories) wrote none; the field keeps them replaying
	// as they ran.
	FinalState bool `json:",omitempty"`
	// QuietSuccess makes the run write CourierState only when it ends other than sent (dead,
	// or pending for a paused topic): a run that closes Completed without a state delivered
	// its record, so a sent record costs no upsert (one event and one billable action less),
	// and the starter sets no state at the start (ExecutionStatus Running says it). It
	// overrides FinalState, which the relay still sets so that a worker from before
	// QuietSuccess, running a run started by a newer relay during a rolling upgrade, writes
	// "sent". Runs started before it (recorded histories) replay as they ran.
	QuietSuccess bool `json:",omitempty"`
}

// OutboxDeliveryResult is the delivery workflow's outcome.
type OutboxDeliveryResult struct {
	Status      courier.OutboxStatus // sent or dead; pending when Paused
	AlreadySent bool                 // a repeated delivery found the record sent
	LastError   string               // why it is dead
	// Paused: the record's topic was paused when its attempt came; it was handed back to
	// pending without an attempt and the run ends, so no budget is spent while the pause
	// lasts. A claim after the resume starts a new run for it.
	Paused bool `json:",omitempty"`
}

// markDeadOptions retries marking a record dead until the database answers: the record must
// not stay in limbo.
var markDeadOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         TemporalRetry(untilDone),
}

// OutboxDelivery publishes one outbox record with retries and backoff, then the record is
// sent and the run completes (without a CourierState: QuietSuccess; "sent" for a run started
// with FinalState only).
// The first attempt is a local activity (deliverLocalFirst). Once the budget is spent (or the
// failure is permanent) it marks the record dead with its last error, writes "dead" to
// CourierState, and the run fails with it (ErrTypeOutboxDead), so the Temporal UI lists it
// under Failures.
func OutboxDelivery(ctx workflow.Context, p OutboxDeliveryParams) (OutboxDeliveryResult, error) {
	res, err := deliverLocalFirst(ctx, contract.DeliverParams{Source: p.Source, ID: p.ID}, OutboxRetry(p.Retry))
	if err == nil && res.Paused {
		// Only an activity that knows pauses answers Paused, so runs recorded before pauses
		// never take this branch and replay as they ran.
		if p.FinalState || p.QuietSuccess {
			_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(courier.OutboxPending)))
		}
		return OutboxDeliveryResult{Status: courier.OutboxPending, Paused: true}, nil
	}
	if err == nil {
		if p.FinalState && !p.QuietSuccess {
			_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(courier.OutboxSent)))
		}
		return OutboxDeliveryResult{Status: courier.OutboxSent, AlreadySent: res.AlreadySent}, nil
	}
	lastErr := rootMessage(err)
	mctx := workflow.WithActivityOptions(ctx, markDeadOptions)
	if err := workflow.ExecuteActivity(mctx, contract.MarkOutboxDeadName,
		contract.MarkDeadParams{Source: p.Source, ID: p.ID, LastError: lastErr}).Get(ctx, nil); err != nil {
		return OutboxDeliveryResult{}, err
	}
	dead := OutboxDeliveryResult{Status: courier.OutboxDead, LastError: lastErr}
	_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(courier.OutboxDead)))
	return dead, temporal.NewNonRetryableApplicationError(lastErr, ErrTypeOutboxDead, nil, dead)
}

// deliver runs the delivery activity with what is left of the budget: Temporal retries it on
// the server with the budget's backoff.
func deliver(ctx workflow.Context, params contract.DeliverParams, retry courier.RetryPolicy) (contract.DeliverResult, error) {
	dctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: retry.AttemptTimeout,
		RetryPolicy:         TemporalRetry(retry, outboxNonRetryable...),
	})
	var res contract.DeliverResult
	err := workflow.ExecuteActivity(dctx, contract.DeliverOutboxName, params).Get(ctx, &res)
	return res, err
}

// LocalAttemptTimeout bounds an outbox record's first, local attempt (less if the budget's
// attempt timeout is shorter). The workflow task that runs it stays open meanwhile, holding a
// workflow task slot, and past the engine's 10 s workflow task timeout the SDK would have to
// keep it alive with extra workflow tasks; an attempt that takes longer ends as a timeout and
// the activity's attempts, with the whole attempt timeout, take over.
const LocalAttemptTimeout = 5 * time.Second

// deliverLocalFirst makes the first attempt in a local activity: it runs in the worker that
// runs the workflow task starting the run, is recorded as one marker, and the run completes in
// that same workflow task when it succeeds. The attempt is bounded by LocalAttemptTimeout; if
// this worker dies during it, the workflow task times out and another worker makes the
// attempt again (the broker drops the repeated message id). A first attempt that failed and
// may be retried is followed by the budget's first backoff on a durable timer, then the rest of
// the budget as the activity deliver runs, with the backoff the budget gives from the second
// attempt on. So the attempts and waits are the budget's, and a failing destination's retries
// wait on the server, not in a worker.
func deliverLocalFirst(ctx workflow.Context, params contract.DeliverParams, retry courier.RetryPolicy) (contract.DeliverResult, error) {
	timeout := min(retry.AttemptTimeout, LocalAttemptTimeout)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: timeout,
		StartToCloseTimeout:    timeout,
		// One attempt; the activity reads the first backoff from it for next_attempt_at.
		RetryPolicy: TemporalRetry(firstAttempt(retry), outboxNonRetryable...),
	})
	var res contract.DeliverResult
	err := workflow.ExecuteLocalActivity(lctx, contract.DeliverOutboxName, params).Get(ctx, &res)
	if err == nil || retry.MaxAttempts <= 1 || !retryable(err) {
		return res, err
	}
	if err := workflow.Sleep(ctx, firstBackoff(retry)); err != nil {
		return res, err // cancelled while it waited
	}
	return deliver(ctx, params, afterFirst(retry))
}

// retryable says whether a failed attempt may be tried again: not if the run was cancelled or
// the error is one no retry can fix.
func retryable(err error) bool {
	if temporal.IsCanceledError(err) {
		return false
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return !app.NonRetryable() && !slices.Contains(outboxNonRetryable, app.Type())
	}
	return true // a timeout or a panic
}

// rootMessage extracts the activity's own error message from Temporal's wrappers, saying each
// cause once: an application error's Error() repeats its cause after its type
// ("mq: no destination … (type: UnknownTopic, retryable: false): mq: no destination …"), so
// only its message is kept.
func rootMessage(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	var to *temporal.TimeoutError
	if errors.As(err, &to) {
		return "timeout: " + to.Error()
	}
	return err.Error()
}
