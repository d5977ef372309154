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

// The signal of the run of a timer of its own whose row in courier's database decides it
// (RowTimer, of the workflow type courier.KindTimer.Workflow): the API decides its cancel and
// reschedule in the row, and the run follows it.
const (
	// SignalChangeTimer tells a row timer's run what the API decided in its row (a TimerChange),
	// so it re-arms at the new fire time, or ends if cancelled. The server takes a signal
	// durably without a worker; a signal that is lost only makes the run learn the change from
	// the row at its fire time (or from the sweep, for a fire time moved earlier).
	SignalChangeTimer = "change-timer"
)

// TimerChange is a change the API decided in a timer's row: a new fire time, or a cancel.
// Version is the row's version after it: a run applies only a change newer than what it has,
// so changes arriving out of order leave the latest.
type TimerChange struct {
	Version   int
	FireAt    time.Time
	Cancelled bool
}

// timerRowOptions run the local activities that read and write a timer's row on courier's
// workflow queue: quick, retried until the database answers; an unknown business type fails
// the timer.
var timerRowOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         TemporalRetry(untilDone, contract.ErrTypeUnknownBizType),
}

// rowTimerSkewWait is the least a run waits before it claims again when its fire time has come
// by the engine's clock but not yet by the database's.
const rowTimerSkewWait = 100 * time.Millisecond

// RowTimer is a timer of its own whose row in courier's database decides it: the API cancels
// and reschedules the row (guarded: only a scheduled timer changes) and signals the run, which
// re-arms its durable timer. At its fire time the run claims the row (scheduled → firing, due
// by the database's clock) before it delivers, so a cancel acknowledged first always wins and
// a timer never fires before the fire time its row holds, whatever the run has heard. It then
// delivers through the business type's queue with its retry budget and records the end in the
// row. Updates from clients that still send changes to the run are decided in the row too.
// Any number of changes works: the run continues as new when the server suggests it.
func RowTimer(ctx workflow.Context, p TimerParams) (TimerSnapshot, error) {
	st := TimerSnapshot{State: courier.TimerScheduled, FireAt: p.FireAt, Version: p.Version}
	claim := workflow.GetInfo(ctx).WorkflowExecution.RunID // also the delivery's id (deliveryID)
	lctx := workflow.WithLocalActivityOptions(ctx, timerRowOptions)
	changes := 0     // changes applied by this run
	changed := false // a change came since the run last armed its timer
	shown := st      // what the search attributes say
	// publish keeps the state and fire time searchable in the Temporal UI (the API reads the
	// row), with an upsert only when they changed.
	publish := func() {
		if st.State == shown.State && st.FireAt.Equal(shown.FireAt) {
			return
		}
		_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(st.State)), saFireAt.ValueSet(st.FireAt))
		shown = st
	}
	apply := func(c TimerChange) {
		if c.Version <= st.Version || st.State != courier.TimerScheduled {
			return
		}
		st.Version = c.Version
		if c.Cancelled {
			st.State = courier.TimerCancelled
		} else if !c.FireAt.IsZero() {
			st.FireAt = c.FireAt
		}
		changes++
		changed = true
	}
	if err := workflow.SetQueryHandler(ctx, QueryTimerState, func() (TimerSnapshot, error) { return st, nil }); err != nil {
		return st, err
	}
	// An update is decided in the row like the API's change, and the row's answer applied.
	decide := func(ctx workflow.Context, req contract.ChangeTimerRowParams, verb string) (TimerSnapshot, error) {
		var res contract.TimerRowChange
		if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, timerRowOptions),
			contract.ChangeTimerRowName, req).Get(ctx, &res); err != nil {
			return st, err
		}
		apply(TimerChange{Version: res.Version, FireAt: res.FireAt, Cancelled: res.State == courier.TimerCancelled})
		if !res.Changed {
			return st, temporal.NewApplicationError(fmt.Sprintf("timer is %s; it cannot be %s", res.State, verb), ErrTypeTimerClosed)
		}
		return st, nil
	}
	if err := setTimerUpdates(ctx, &st,
		func(ctx workflow.Context, req RescheduleRequest) (TimerSnapshot, error) {
			return decide(ctx, contract.ChangeTimerRowParams{BizType: p.BizType, BizID: p.BizID, FireAt: req.FireAt}, "rescheduled")
		},
		func(ctx workflow.Context) (TimerSnapshot, error) {
			return decide(ctx, contract.ChangeTimerRowParams{BizType: p.BizType, BizID: p.BizID, Cancel: true}, "cancelled")
		},
	); err != nil {
		return st, err
	}
	signals := workflow.GetSignalChannel(ctx, SignalChangeTimer)
	drain := func() {
		for {
			var c TimerChange
			if !signals.ReceiveAsync(&c) {
				return
			}
			apply(c)
		}
	}
	continueAsNew := func() bool {
		return changes > 0 && (changes >= timerUpdatesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested())
	}

	var cfg contract.BizTypeDelivery
	var failure error // the timer failed before its delivery (its type unknown, its row gone)
	claimed := false
	atLeast := time.Duration(0) // the database's clock is behind the engine's: wait before claiming again
	for st.State == courier.TimerScheduled {
		drain()
		publish()
		if st.State != courier.TimerScheduled {
			break
		}
		if continueAsNew() {
			// Let every update in flight finish here; signals not yet read are read now, and
			// any that come later reach the new run (the row has them anyway).
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return st, err
			}
			drain()
			if st.State == courier.TimerScheduled {
				return st, workflow.NewContinueAsNewError(ctx, courier.KindTimer.Workflow, TimerParams{
					BizType: p.BizType, BizID: p.BizID, FireAt: st.FireAt, Payload: p.Payload, Version: st.Version})
			}
			continue
		}
		if wait := max(st.FireAt.Sub(workflow.Now(ctx)), atLeast); wait > 0 {
			tctx, cancelTimer := workflow.WithCancel(ctx)
			timer := workflow.NewTimer(tctx, wait)
			changed = false
			if err := workflow.Await(ctx, func() bool { return changed || timer.IsReady() || signals.Len() > 0 }); err != nil {
				cancelTimer()
				return st, err
			}
			fired := timer.IsReady() // before the cancel, which makes the timer ready too
			cancelTimer()            // a no-op if it fired; otherwise its fire time is void
			if !fired || changed || signals.Len() > 0 {
				continue // a change: read it, and arm for the new fire time (or claim, if it has come)
			}
		}
		atLeast = 0
		// Due by the engine's clock: the row decides, by the database's.
		var c contract.TimerRunClaim
		err := workflow.ExecuteLocalActivity(lctx, contract.ClaimTimerRunName,
			contract.ClaimTimerRunParams{BizType: p.BizType, BizID: p.BizID, Claim: claim}).Get(ctx, &c)
		switch {
		case err != nil: // its business type is unknown; the row is claimed (the claim comes first)
			st.State, st.LastError, claimed, failure = courier.TimerFailed, rootMessage(err), true, err
		case c.Claimed:
			st.State, cfg, claimed = courier.TimerFiring, c.Delivery, true
		case !c.Found:
			st.State, st.LastError = courier.TimerFailed, "the timer's row is gone from courier's database"
			failure = errors.New(st.LastError)
		case c.State == courier.TimerScheduled:
			// Not due yet by the database's clock, or moved later by a change this run has not
			// heard of: wait for the row's fire time.
			apply(TimerChange{Version: c.Version, FireAt: c.FireAt})
			if !c.FireAt.After(workflow.Now(ctx)) {
				atLeast = rowTimerSkewWait
			}
		case c.State == courier.TimerCancelled:
			apply(TimerChange{Version: c.Version, Cancelled: true})
			st.State = courier.TimerCancelled
		default:
			// Delivered or being delivered by another run: nothing is this run's to deliver.
			st.State, st.Version = c.State, c.Version
		}
	}
	publish()
	if !claimed && failure == nil { // cancelled, or not this run's to deliver
		return st, workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	}

	if failure == nil {
		retry := OutboxRetry(cfg.Retry())
		if err := deliverTimer(ctx, p, cfg, retry, &st); err != nil {
			st.State, st.LastError = courier.TimerFailed, rootMessage(err)
		} else {
			st.State = courier.TimerDelivered
		}
		publish()
	}
	if claimed {
		if err := workflow.ExecuteLocalActivity(lctx, contract.FinishTimerRunName, contract.FinishTimerRunParams{
			BizType: p.BizType, BizID: p.BizID, Claim: claim, State: st.State, Attempts: st.Attempts, LastError: st.LastError,
		}).Get(ctx, nil); err != nil {
			return st, err
		}
	}
	if st.State == courier.TimerFailed {
		// Once per timer (the logger is quiet on replay): its attempts before were expected
		// conditions, logged by no one.
		workflow.GetLogger(ctx).Error("timer failed for good: redeliver it once the cause is fixed",
			"biz_type", p.BizType, "biz_id", p.BizID, "attempts", st.Attempts, "error", st.LastError)
		if cfg.NotifyFailure {
			notifyTimerFailure(ctx, p, cfg, st)
		}
	}
	return timerEnd(ctx, st)
}
