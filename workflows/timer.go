package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// Names of the timer workflow's messages (stable; never the Go names). The workflow's own
// type is courier.KindRowlessTimer.Workflow, which KindBucketedTimer and KindScheduleRun share.
const (
	UpdateReschedule   = "reschedule-timer"
	UpdateCancel       = "cancel-timer"
	QueryTimerState    = "timer-state"
	ErrTypeTimerClosed = "TimerClosed"
	// ErrTypeTimerFailed is the failure type of a timer run whose delivery failed (its budget
	// spent, a permanent refusal, an unknown business type): the run ends Failed with the last
	// error as the message, so the Temporal UI lists it under Failures. Its details carry the
	// TimerSnapshot.
	ErrTypeTimerFailed = "TimerFailed"
)

// TimerParams is the timer workflow's input. Its ID is timer/<biz_type>/<biz_id>.
type TimerParams struct {
	BizType string
	BizID   string
	FireAt  time.Time
	Payload []byte // JSON, delivered as is
	// Version is the state version a continued run starts from (0 for a new timer), so
	// versions keep rising across runs.
	Version int
	// HandOver, when set, makes this run the delivery of a bucketed timer whose row is in
	// courier's database: it delivers at once (FireAt has come) and records how the delivery
	// ended in the row. Nil for a timer of its own (the default mode).
	HandOver *TimerHandOver `json:",omitempty"`
}

// TimerHandOver is what a bucketed timer's run starts from: the attempts its bucket already
// made (1 after a bucket's failed delivery, 0 for a redelivery) and how the last one ended.
type TimerHandOver struct {
	Attempts   int
	LastError  string
	Permanent  bool   // the bucket's attempt failed for good: nothing to retry
	DeliveryID string // the delivery id the bucket's attempt used; "" for a new one (this run's)
}

// TimerSnapshot is a timer as its run sees it: what the state query (QueryTimerState), the
// updates and the workflow result report. Its field names are in recorded histories and query
// results; the type's name is not.
type TimerSnapshot struct {
	State     courier.TimerState // where the timer is in its life
	FireAt    time.Time
	Attempts  int
	LastError string
	Version   int // bumped by every accepted change, so callers can order what they saw
}

// RescheduleRequest moves the fire time.
type RescheduleRequest struct {
	FireAt time.Time
}

// A timer continues as new (a fresh run, same workflow id, the state carried in its input) when
// the server suggests it or after timerUpdatesPerRun accepted changes, whichever comes first.
// The server refuses updates past a per-run limit (history.maxTotalUpdates, 2,000 by default)
// and histories grow with every reschedule; a fresh run has neither problem.
const timerUpdatesPerRun = 1000

// loadBizTypeOptions reads the type's delivery settings; a local activity, quick and retried.
var loadBizTypeOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         TemporalRetry(untilDone, contract.ErrTypeUnknownBizType),
}

// timerDeliveryNonRetryable are the delivery's error types that no retry can fix.
var timerDeliveryNonRetryable = []string{contract.ErrTypePermanentDelivery, contract.ErrTypeUnknownBizType}

// setTimerUpdates registers a timer's reschedule and cancel updates (both modes): each is
// accepted only while the timer *st is scheduled, and applied by reschedule or cancel.
func setTimerUpdates(ctx workflow.Context, st *TimerSnapshot,
	reschedule func(workflow.Context, RescheduleRequest) (TimerSnapshot, error),
	cancel func(workflow.Context) (TimerSnapshot, error)) error {
	mustBeScheduled := func(verb string) error {
		if st.State != courier.TimerScheduled {
			return temporal.NewApplicationError(fmt.Sprintf("timer is %s; it cannot be %s", st.State, verb), ErrTypeTimerClosed)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateReschedule, reschedule,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req RescheduleRequest) error {
			if req.FireAt.IsZero() {
				return errors.New("fire_at is required")
			}
			return mustBeScheduled("rescheduled")
		}},
	); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel, cancel,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error { return mustBeScheduled("cancelled") }})
}

// timerFailureNotifyChange guards what runs recorded before it did not do: a timer that fails
// for good notifies its business type's failure target, and says how many attempts it made.
const timerFailureNotifyChange = "timer-failure-notify"

// notifyFailureOptions send a failed timer's event with a bounded budget of its own: about an
// hour of retries, then the event is given up (and logged); the timer is failed either way.
var notifyFailureOptions = workflow.ActivityOptions{
	StartToCloseTimeout: time.Minute,
	RetryPolicy: TemporalRetry(courier.RetryPolicy{InitialInterval: time.Second, BackoffCoef: 2, MaxInterval: 5 * time.Minute,
		MaxAttempts: 20}, contract.ErrTypePermanentDelivery),
}

// recordTimerOptions write a bucketed timer's end into its row until the database answers.
var recordTimerOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         TemporalRetry(untilDone),
}

// Timer waits until FireAt (never earlier), accepting reschedules and a cancel as updates so the
// caller learns the outcome, then delivers once through the business type's queue with its
// retry budget. A cancel that was accepted wins: the timer never fires after it. Any number of
// reschedules works: a scheduled timer continues as new when the server suggests it. A timer
// whose delivery failed ends Failed (ErrTypeTimerFailed) with its state in the details.
func Timer(ctx workflow.Context, p TimerParams) (TimerSnapshot, error) {
	st := TimerSnapshot{State: courier.TimerScheduled, FireAt: p.FireAt, Version: p.Version}
	if p.HandOver != nil {
		// The bucket has fired it: it can no longer be rescheduled or cancelled.
		st.State, st.Attempts, st.LastError = courier.TimerFiring, p.HandOver.Attempts, p.HandOver.LastError
	}
	changed := false
	updates := 0 // changes accepted by this run
	// publish keeps the state and fire time searchable in the Temporal UI and the list API.
	publish := func() {
		_ = workflow.UpsertTypedSearchAttributes(ctx,
			saState.ValueSet(string(st.State)), saFireAt.ValueSet(st.FireAt))
	}
	if err := workflow.SetQueryHandler(ctx, QueryTimerState, func() (TimerSnapshot, error) { return st, nil }); err != nil {
		return st, err
	}
	if err := setTimerUpdates(ctx, &st,
		func(ctx workflow.Context, req RescheduleRequest) (TimerSnapshot, error) {
			st.FireAt, changed = req.FireAt, true
			st.Version++
			updates++
			return st, nil
		},
		func(ctx workflow.Context) (TimerSnapshot, error) {
			st.State, changed = courier.TimerCancelled, true
			st.Version++
			updates++
			return st, nil
		},
	); err != nil {
		return st, err
	}

	// continueAsNew reports whether this run should hand over to a fresh one. Only a run that
	// accepted changes does, so a server that keeps suggesting it cannot cause a loop of runs.
	continueAsNew := func() bool {
		return updates > 0 && (updates >= timerUpdatesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested())
	}

	for st.State == courier.TimerScheduled {
		wait := st.FireAt.Sub(workflow.Now(ctx))
		if wait <= 0 {
			break
		}
		if continueAsNew() {
			// Let every accepted update finish here: one still running when the run ends
			// would fail. Updates not yet accepted are retried by the server on the new run.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return st, err
			}
			if st.State == courier.TimerScheduled {
				return st, workflow.NewContinueAsNewError(ctx, courier.KindRowlessTimer.Workflow, TimerParams{
					BizType: p.BizType, BizID: p.BizID, FireAt: st.FireAt, Payload: p.Payload, Version: st.Version})
			}
			break
		}
		tctx, cancelTimer := workflow.WithCancel(ctx)
		timer := workflow.NewTimer(tctx, wait)
		changed = false
		if err := workflow.Await(ctx, func() bool { return changed || timer.IsReady() }); err != nil {
			cancelTimer()
			return st, err
		}
		cancelTimer() // a no-op if it fired; otherwise the old fire time is void
		publish()
	}
	if st.State == courier.TimerCancelled {
		publish()
		return st, workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	}

	st.State = courier.TimerFiring
	publish()
	var cfg contract.BizTypeDelivery
	lctx := workflow.WithLocalActivityOptions(ctx, loadBizTypeOptions)
	if err := workflow.ExecuteLocalActivity(lctx, contract.LoadBizTypeName, p.BizType).Get(ctx, &cfg); err != nil {
		st.State, st.LastError = courier.TimerFailed, rootMessage(err)
		publish()
		return st, timerFailure(st)
	}
	retry := OutboxRetry(cfg.Retry())
	err := deliverTimer(ctx, p, cfg, retry, &st)
	if err != nil {
		st.State, st.LastError = courier.TimerFailed, rootMessage(err)
	} else {
		st.State, st.LastError = courier.TimerDelivered, "" // a bucket's failed attempt is behind it
	}
	publish()
	if p.HandOver != nil {
		rctx := workflow.WithActivityOptions(ctx, recordTimerOptions)
		if err := workflow.ExecuteActivity(rctx, contract.RecordTimerResultName, contract.RecordTimerResultParams{
			BizType: p.BizType, BizID: p.BizID, State: st.State, Attempts: st.Attempts, LastError: st.LastError}).Get(ctx, nil); err != nil {
			return st, err
		}
	}
	if st.State == courier.TimerFailed {
		// Once per timer (the logger is quiet on replay): its attempts before were expected
		// conditions, logged by no one.
		workflow.GetLogger(ctx).Error("timer failed for good: redeliver it once the cause is fixed",
			"biz_type", p.BizType, "biz_id", p.BizID, "attempts", st.Attempts, "error", st.LastError)
	}
	if st.State == courier.TimerFailed && cfg.NotifyFailure &&
		workflow.GetVersion(ctx, timerFailureNotifyChange, workflow.DefaultVersion, 1) >= 1 {
		notifyTimerFailure(ctx, p, cfg, st)
	}
	return timerEnd(ctx, st)
}

// notifyTimerFailure tells the business type's failure_url or failure_topic that the timer
// failed for good. A notification that could not be sent leaves the timer failed all the same:
// the activity logs it, and the timer is listed and redeliverable.
func notifyTimerFailure(ctx workflow.Context, p TimerParams, cfg contract.BizTypeDelivery, st TimerSnapshot) {
	nctx := workflow.WithTaskQueue(workflow.WithActivityOptions(ctx, notifyFailureOptions), cfg.TaskQueue)
	_ = workflow.ExecuteActivity(nctx, contract.NotifyTimerFailureName, contract.NotifyTimerFailureParams{
		BizType: p.BizType, BizID: p.BizID, FireAt: st.FireAt, Attempts: st.Attempts, LastError: st.LastError,
		DeliveryID: deliveryID(ctx, p)}).Get(ctx, nil)
}

// timerEnd ends a timer's run (either mode) once its update handlers have finished: with the
// failure if it failed for good.
func timerEnd(ctx workflow.Context, st TimerSnapshot) (TimerSnapshot, error) {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return st, err
	}
	if st.State == courier.TimerFailed {
		return st, timerFailure(st)
	}
	return st, nil
}

// deliveryID is the id receivers deduplicate a timer's delivery on: the run's id, or the id
// the bucket's attempt used when the run took over from it.
func deliveryID(ctx workflow.Context, p TimerParams) string {
	if p.HandOver != nil && p.HandOver.DeliveryID != "" {
		return p.HandOver.DeliveryID
	}
	return workflow.GetInfo(ctx).WorkflowExecution.RunID
}

// deliverTimer delivers the timer through its type's queue with the type's retry budget (the
// rest of it, after the attempts a bucket made), and counts the attempts in st, also when the
// delivery failed for good.
func deliverTimer(ctx workflow.Context, p TimerParams, cfg contract.BizTypeDelivery, retry courier.RetryPolicy, st *TimerSnapshot) error {
	if h := p.HandOver; h != nil && h.Attempts > 0 {
		if h.Permanent || h.Attempts >= int(retry.MaxAttempts) {
			return errors.New(h.LastError)
		}
		// The bucket made the first attempt: wait the budget's first backoff, then the rest.
		if err := workflow.Sleep(ctx, firstBackoff(retry)); err != nil {
			return err
		}
		retry = afterFirst(retry)
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           cfg.TaskQueue,
		StartToCloseTimeout: timeout + 5*time.Second,
		RetryPolicy:         TemporalRetry(retry, timerDeliveryNonRetryable...),
	})
	made := 0
	if p.HandOver != nil {
		made = p.HandOver.Attempts
	}
	var n int
	err := workflow.ExecuteActivity(dctx, contract.DeliverTimerName, contract.DeliverTimerParams{
		BizType: p.BizType, BizID: p.BizID, DeliveryID: deliveryID(ctx, p), FireAt: st.FireAt, Payload: p.Payload,
	}).Get(ctx, &n)
	st.Attempts = made + n
	if err != nil {
		st.Attempts = made + failedAttempts(err, retry)
	}
	return err
}

// failedAttempts is how many attempts a failed delivery made: the attempt number its last
// error carries, or the whole budget when the last attempt timed out after every retry.
func failedAttempts(err error, retry courier.RetryPolicy) int {
	var app *temporal.ApplicationError
	var d contract.DeliveryAttempt
	if errors.As(err, &app) && app.HasDetails() && app.Details(&d) == nil && d.Attempt > 0 {
		return d.Attempt
	}
	var act *temporal.ActivityError
	if errors.As(err, &act) && act.RetryState() == enumspb.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED {
		return int(retry.MaxAttempts)
	}
	return 1
}

// timerFailure is how a failed timer's run ends: Failed with the last error as the message and
// the state in the details (timers.Service.Get reads it from there).
func timerFailure(st TimerSnapshot) error {
	return temporal.NewNonRetryableApplicationError(st.LastError, ErrTypeTimerFailed, nil, st)
}
