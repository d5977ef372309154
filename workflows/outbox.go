package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// OutboxDeliveryName is the registered name of the per-record delivery workflow.
const OutboxDeliveryName = "outbox-delivery"

// ErrTypeOutboxDead is the failure type of a delivery run whose record went dead: the run ends
// Failed with the record's last error as the message, after the row has been marked dead (the
// row stays the source of truth). Its details carry the OutboxDeliveryResult.
const ErrTypeOutboxDead = "OutboxDead"

// outboxFailsChange guards what runs recorded before it did not do: the record's state is
// written to the CourierState search attribute, and a dead record's run ends Failed.
const outboxFailsChange = "outbox-dead-fails"

// OutboxDeliveryV is the delivery code version the relay starts new runs with
// (OutboxDeliveryParams.V). A run that carries it in its input, which is in its history, needs
// no workflow.GetVersion marker (an event and a search attribute upsert each) and does not
// upsert CourierState=sent: a Completed run is a sent record. Runs started by older relays
// have V = 0 and replay the guarded path.
const OutboxDeliveryV = 1

var saOutboxState = temporal.NewSearchAttributeKeyKeyword(courier.SAState)

// DefaultOutboxRetry is the outbox delivery budget when the worker's config sets none: 20
// attempts from 1 s doubling to a 5 min cap, about an hour in all.
var DefaultOutboxRetry = RetryPolicy{
	InitialInterval: time.Second,
	BackoffCoef:     2,
	MaxInterval:     5 * time.Minute,
	MaxAttempts:     20,
	AttemptTimeout:  30 * time.Second,
}

// WithDefaults fills zero fields from DefaultOutboxRetry.
func (r RetryPolicy) WithDefaults() RetryPolicy {
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
	Retry  RetryPolicy
	// V is the code version the run was started for: OutboxDeliveryV from the relay, 0 in
	// runs started before it existed (they take the path guarded by outboxFailsChange).
	V int `json:",omitempty"`
}

// OutboxDeliveryResult is the delivery workflow's outcome.
type OutboxDeliveryResult struct {
	Status      courier.OutboxStatus // sent or dead
	AlreadySent bool                 // a repeated delivery found the record sent
	LastError   string               // why it is dead
}

// markDeadOptions retries marking a record dead until the database answers: the record must
// not stay in limbo.
var markDeadOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         untilDone.Temporal(),
}

// OutboxDelivery publishes one outbox record with retries and backoff, then the record is
// sent; once the budget is spent (or the failure is permanent) it marks the record dead with
// its last error and the run fails with it (ErrTypeOutboxDead), so the Temporal UI lists it
// under Failures. A dead record's state is kept in CourierState; a sent one's run completes
// (runs started before OutboxDeliveryV also write "sent" there).
func OutboxDelivery(ctx workflow.Context, p OutboxDeliveryParams) (OutboxDeliveryResult, error) {
	// fails says whether this run writes its state and fails when the record goes dead: always
	// from OutboxDeliveryV, and behind outboxFailsChange in runs started before it.
	fails := func() bool {
		return p.V >= OutboxDeliveryV || workflow.GetVersion(ctx, outboxFailsChange, workflow.DefaultVersion, 1) >= 1
	}
	retry := p.Retry.WithDefaults()
	dctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: retry.AttemptTimeout,
		RetryPolicy:         retry.Temporal(outboxNonRetryable...),
	})
	var res contract.DeliverResult
	err := workflow.ExecuteActivity(dctx, contract.DeliverOutboxName,
		contract.DeliverParams{Source: p.Source, ID: p.ID}).Get(ctx, &res)
	if err == nil {
		if p.V < OutboxDeliveryV && fails() {
			_ = workflow.UpsertTypedSearchAttributes(ctx, saOutboxState.ValueSet(string(courier.OutboxSent)))
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
	if !fails() {
		return dead, nil
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, saOutboxState.ValueSet(string(courier.OutboxDead)))
	return dead, temporal.NewNonRetryableApplicationError(lastErr, ErrTypeOutboxDead, nil, dead)
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
