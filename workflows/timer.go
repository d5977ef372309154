package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// Names of the timer workflow and its messages (stable; never the Go names).
const (
	TimerName          = "timer"
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

var (
	saState  = temporal.NewSearchAttributeKeyKeyword(courier.SAState)
	saFireAt = temporal.NewSearchAttributeKeyTime(courier.SAFireAt)
)

// loadBizTypeOptions reads the type's delivery settings; a local activity, quick and retried.
var loadBizTypeOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         untilDone.Temporal(contract.ErrTypeUnknownBizType),
}

// timerDeliveryNonRetryable are the delivery's error types that no retry can fix.
var timerDeliveryNonRetryable = []string{contract.ErrTypePermanentDelivery, contract.ErrTypeUnknownBizType}

// Timer waits until FireAt (never earlier), accepting reschedules and a cancel as updates so the
// caller learns the outcome, then delivers once through the business type's queue with its
// retry budget. A cancel that was accepted wins: the timer never fires after it. Any number of
// reschedules works: a scheduled timer continues as new when the server suggests it. A timer
// whose delivery failed ends Failed (ErrTypeTimerFailed) with its state in the details.
func Timer(ctx workflow.Context, p TimerParams) (TimerSnapshot, error) {
	st := TimerSnapshot{State: courier.TimerScheduled, FireAt: p.FireAt, Version: p.Version}
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
	mustBeScheduled := func(verb string) error {
		if st.State != courier.TimerScheduled {
			return temporal.NewApplicationError(fmt.Sprintf("timer is %s; it cannot be %s", st.State, verb), ErrTypeTimerClosed)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateReschedule,
		func(ctx workflow.Context, req RescheduleRequest) (TimerSnapshot, error) {
			st.FireAt, changed = req.FireAt, true
			st.Version++
			updates++
			return st, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req RescheduleRequest) error {
			if req.FireAt.IsZero() {
				return errors.New("fire_at is required")
			}
			return mustBeScheduled("rescheduled")
		}},
	); err != nil {
		return st, err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel,
		func(ctx workflow.Context) (TimerSnapshot, error) {
			st.State, changed = courier.TimerCancelled, true
			st.Version++
			updates++
			return st, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context) error { return mustBeScheduled("cancelled") }},
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
				return st, workflow.NewContinueAsNewError(ctx, TimerName, TimerParams{
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
	retry := RetryPolicy{InitialInterval: cfg.InitialInterval, BackoffCoef: cfg.Backoff,
		MaxInterval: cfg.MaxInterval, MaxAttempts: cfg.MaxAttempts}.WithDefaults()
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	dctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           cfg.TaskQueue,
		StartToCloseTimeout: timeout + 5*time.Second,
		RetryPolicy:         retry.Temporal(timerDeliveryNonRetryable...),
	})
	info := workflow.GetInfo(ctx)
	err := workflow.ExecuteActivity(dctx, contract.DeliverTimerName, contract.DeliverTimerParams{
		BizType: p.BizType, BizID: p.BizID, DeliveryID: info.WorkflowExecution.RunID,
		FireAt: st.FireAt, Payload: p.Payload,
	}).Get(ctx, &st.Attempts)
	if err != nil {
		st.State, st.LastError = courier.TimerFailed, rootMessage(err)
	} else {
		st.State = courier.TimerDelivered
	}
	publish()
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return st, err
	}
	if st.State == courier.TimerFailed {
		return st, timerFailure(st)
	}
	return st, nil
}

// timerFailure is how a failed timer's run ends: Failed with the last error as the message and
// the state in the details (timers.Service.Get reads it from there).
func timerFailure(st TimerSnapshot) error {
	return temporal.NewNonRetryableApplicationError(st.LastError, ErrTypeTimerFailed, nil, st)
}
