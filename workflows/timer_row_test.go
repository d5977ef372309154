package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// rowEnv runs a row timer against a row kept in memory, with the database's clock dbSkew off
// the engine's: the claim, the change and the end behave as the store's guarded statements do
// (a claim takes only a scheduled row due by the database's clock; a change applies only to a
// scheduled row, bumping its version), so the tests can change the row behind the run's back.
type rowEnv struct {
	*testsuite.TestWorkflowEnvironment
	start     time.Time
	dbSkew    time.Duration
	row       *courier.TimerRecord // nil: the timer has no row
	claim     string
	claims    []time.Time // engine times of every claim
	delivered []time.Time
	finished  []contract.FinishTimerRunParams
	notified  []contract.NotifyTimerFailureParams
	cfg       contract.BizTypeDelivery
	unknown   bool // the business type is gone
}

func newRowEnv(t *testing.T, in time.Duration, deliver func(n int) error) *rowEnv {
	var s testsuite.WorkflowTestSuite
	env := &rowEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment(), cfg: bizCfg}
	env.start = env.Now()
	env.row = &courier.TimerRecord{BizType: "orders", BizID: "o-1", FireAt: env.start.Add(in), State: courier.TimerScheduled,
		Mode: courier.TimerModeWorkflow}
	env.RegisterWorkflowWithOptions(workflows.RowTimer, workflow.RegisterOptions{Name: courier.KindTimer.Workflow})
	env.RegisterActivityWithOptions(func(ctx context.Context, p contract.ClaimTimerRunParams) (contract.TimerRunClaim, error) {
		require.Equal(t, activity.GetInfo(ctx).WorkflowExecution.RunID, p.Claim, "the run claims by its id")
		env.claims = append(env.claims, env.Now())
		r := env.row
		if r == nil {
			return contract.TimerRunClaim{}, nil
		}
		if r.State == courier.TimerScheduled && !r.FireAt.After(env.Now().Add(env.dbSkew)) {
			r.State, env.claim = courier.TimerFiring, p.Claim
		}
		out := contract.TimerRunClaim{Found: true, State: r.State, FireAt: r.FireAt, Version: r.Version,
			Claimed: r.State == courier.TimerFiring && env.claim == p.Claim}
		if out.Claimed {
			if env.unknown {
				return contract.TimerRunClaim{}, temporal.NewNonRetryableApplicationError("no such type", contract.ErrTypeUnknownBizType, nil)
			}
			out.Delivery = env.cfg
		}
		return out, nil
	}, activity.RegisterOptions{Name: contract.ClaimTimerRunName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.ChangeTimerRowParams) (contract.TimerRowChange, error) {
		changed := env.change(p.Cancel, p.FireAt)
		return contract.TimerRowChange{Changed: changed, State: env.row.State, FireAt: env.row.FireAt, Version: env.row.Version}, nil
	}, activity.RegisterOptions{Name: contract.ChangeTimerRowName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.FinishTimerRunParams) error {
		require.Equal(t, env.claim, p.Claim, "only the run that claimed the row ends it")
		env.finished = append(env.finished, p)
		env.row.State = p.State
		return nil
	}, activity.RegisterOptions{Name: contract.FinishTimerRunName})
	n := 0
	env.RegisterActivityWithOptions(func(ctx context.Context, p contract.DeliverTimerParams) (int, error) {
		require.Equal(t, env.claim, p.DeliveryID, "the delivery id is the claiming run's")
		require.Equal(t, env.cfg.TaskQueue, activity.GetInfo(ctx).TaskQueue)
		n++
		env.delivered = append(env.delivered, env.Now())
		if deliver != nil {
			if err := deliver(n); err != nil {
				return 0, temporal.NewApplicationErrorWithOptions(err.Error(), contract.ErrTypeRetryableDelivery,
					temporal.ApplicationErrorOptions{Details: []any{contract.DeliveryAttempt{Attempt: int(activity.GetInfo(ctx).Attempt)}}})
			}
		}
		return int(activity.GetInfo(ctx).Attempt), nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.NotifyTimerFailureParams) error {
		env.notified = append(env.notified, p)
		return nil
	}, activity.RegisterOptions{Name: contract.NotifyTimerFailureName})
	return env
}

// change applies a cancel or a reschedule to the row as the store does: only while it is
// scheduled, bumping its version.
func (e *rowEnv) change(cancel bool, fireAt time.Time) bool {
	if e.row.State != courier.TimerScheduled {
		return false
	}
	e.row.Version++
	if cancel {
		e.row.State = courier.TimerCancelled
	} else {
		e.row.FireAt = fireAt
	}
	return true
}

// decide changes the row at a virtual time offset as the API does and, unless lost, signals
// the run what it decided.
func (e *rowEnv) decide(at time.Duration, cancel bool, fireAt time.Time, lost bool) {
	e.RegisterDelayedCallback(func() {
		if e.change(cancel, fireAt) && !lost {
			e.SignalWorkflow(workflows.SignalChangeTimer, workflows.TimerChange{Version: e.row.Version, FireAt: e.row.FireAt, Cancelled: cancel})
		}
	}, at)
}

func (e *rowEnv) run(t *testing.T) workflows.TimerSnapshot {
	t.Helper()
	e.ExecuteWorkflow(courier.KindTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: e.row.FireAt,
		Payload: []byte(`{}`), Version: e.row.Version})
	require.True(t, e.IsWorkflowCompleted())
	var st workflows.TimerSnapshot
	var app *temporal.ApplicationError
	if errors.As(e.GetWorkflowError(), &app) && app.Type() == workflows.ErrTypeTimerFailed {
		require.NoError(t, app.Details(&st))
		return st
	}
	require.NoError(t, e.GetWorkflowError())
	require.NoError(t, e.GetWorkflowResult(&st))
	return st
}

// A row timer claims its row at its fire time, never before, delivers once and records the end.
func TestRowTimerFiresOnTimeNeverEarly(t *testing.T) {
	env := newRowEnv(t, 30*time.Minute, nil)
	st := env.run(t)
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Len(t, env.claims, 1)
	require.Len(t, env.delivered, 1)
	require.False(t, env.delivered[0].Before(env.start.Add(30*time.Minute)), "never early")
	require.Equal(t, []contract.FinishTimerRunParams{{BizType: "orders", BizID: "o-1", Claim: env.claim, State: courier.TimerDelivered,
		Attempts: 1}}, env.finished)
	require.Equal(t, courier.TimerDelivered, env.row.State)
}

// A reschedule decided in the row and signalled re-arms the run: later, or earlier (the old
// fire time is void either way).
func TestRowTimerFollowsReschedules(t *testing.T) {
	for name, to := range map[string]time.Duration{"later": 2 * time.Hour, "earlier": 10 * time.Minute} {
		t.Run(name, func(t *testing.T) {
			env := newRowEnv(t, time.Hour, nil)
			env.decide(5*time.Minute, false, env.start.Add(to), false)
			st := env.run(t)
			require.Equal(t, courier.TimerDelivered, st.State)
			require.Len(t, env.delivered, 1)
			require.False(t, env.delivered[0].Before(env.start.Add(to)), "never before the new fire time")
			require.Less(t, env.delivered[0].Sub(env.start.Add(to)), time.Second, "at the new fire time")
			require.Equal(t, 1, st.Version)
			require.Len(t, env.claims, 1, "one claim, at the new fire time")
		})
	}
}

// A cancel decided in the row ends the run when its signal comes; if the signal is lost, the
// run finds the row cancelled at its fire time. Either way nothing is delivered.
func TestRowTimerCancel(t *testing.T) {
	for name, lost := range map[string]bool{"signalled": false, "signal lost": true} {
		t.Run(name, func(t *testing.T) {
			env := newRowEnv(t, time.Hour, nil)
			env.decide(5*time.Minute, true, time.Time{}, lost)
			st := env.run(t)
			require.Equal(t, courier.TimerCancelled, st.State)
			require.Equal(t, 1, st.Version)
			require.Empty(t, env.delivered, "an acknowledged cancel never fires")
			require.Empty(t, env.finished)
			if lost {
				require.Len(t, env.claims, 1, "the run learns of the cancel from its row at the fire time")
			} else {
				require.Empty(t, env.claims, "the signal ends the run before its fire time")
			}
		})
	}
}

// A reschedule to a later time whose signal was lost: the run's claim at the old fire time
// finds the row scheduled later, and the run waits for it. Never early, whatever the run heard.
func TestRowTimerFollowsTheRowWhenASignalIsLost(t *testing.T) {
	env := newRowEnv(t, time.Hour, nil)
	env.decide(5*time.Minute, false, env.start.Add(3*time.Hour), true)
	st := env.run(t)
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Len(t, env.claims, 2)
	require.Len(t, env.delivered, 1)
	require.False(t, env.delivered[0].Before(env.start.Add(3*time.Hour)), "never before the row's fire time")
	require.Equal(t, 1, st.Version)
}

// Signals that arrive out of order leave the latest change: an older version is ignored.
func TestRowTimerKeepsTheLatestChange(t *testing.T) {
	env := newRowEnv(t, time.Hour, nil)
	env.RegisterDelayedCallback(func() {
		env.row.Version, env.row.FireAt = 2, env.start.Add(2*time.Hour)
		env.SignalWorkflow(workflows.SignalChangeTimer, workflows.TimerChange{Version: 2, FireAt: env.start.Add(2 * time.Hour)})
		env.SignalWorkflow(workflows.SignalChangeTimer, workflows.TimerChange{Version: 1, FireAt: env.start.Add(30 * time.Minute)})
	}, time.Minute)
	st := env.run(t)
	require.Equal(t, 2, st.Version)
	require.Len(t, env.delivered, 1)
	require.False(t, env.delivered[0].Before(env.start.Add(2*time.Hour)))
}

// The database's clock behind the engine's: a claim the database finds not yet due is tried
// again a moment later, so the timer is never early by the database's clock either.
func TestRowTimerWaitsForTheDatabasesClock(t *testing.T) {
	env := newRowEnv(t, time.Hour, nil)
	env.dbSkew = -350 * time.Millisecond
	st := env.run(t)
	require.Equal(t, courier.TimerDelivered, st.State)
	require.GreaterOrEqual(t, len(env.claims), 2)
	require.Len(t, env.delivered, 1)
	require.False(t, env.delivered[0].Add(env.dbSkew).Before(env.start.Add(time.Hour)), "never early by the database's clock")
	for i := 1; i < len(env.claims); i++ {
		require.GreaterOrEqual(t, env.claims[i].Sub(env.claims[i-1]), 100*time.Millisecond, "claims wait a moment, never spin")
	}
}

// Clients that still send changes to the run as updates get the row's decision: a cancel is
// decided in the row and wins; a reschedule of a cancelled timer is refused saying why.
func TestRowTimerUpdatesAreDecidedInTheRow(t *testing.T) {
	env := newRowEnv(t, time.Hour, nil)
	var cancelErr, rescheduleErr error
	var cancelled workflows.TimerSnapshot
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateCancel, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { cancelErr = err }, OnAccept: func() {},
			OnComplete: func(v any, err error) {
				cancelErr = err
				if err == nil {
					cancelled = v.(workflows.TimerSnapshot)
				}
			},
		})
	}, 5*time.Minute)
	env.decide(4*time.Minute, false, env.start.Add(50*time.Minute), false) // an API reschedule before it
	st := env.run(t)
	require.NoError(t, cancelErr)
	require.Equal(t, courier.TimerCancelled, cancelled.State)
	require.Equal(t, 2, cancelled.Version)
	require.Equal(t, courier.TimerCancelled, st.State)
	require.Equal(t, courier.TimerCancelled, env.row.State, "decided in the row")
	require.Empty(t, env.delivered)

	// The row cancelled behind the run's back (the signal lost): an update reschedule is
	// decided in the row, refused, and the run learns the row's state from the answer.
	env = newRowEnv(t, time.Hour, nil)
	env.decide(time.Minute, true, time.Time{}, true)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateReschedule, "", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { rescheduleErr = err }, OnAccept: func() {},
			OnComplete: func(_ any, err error) { rescheduleErr = err },
		}, workflows.RescheduleRequest{FireAt: env.start.Add(2 * time.Hour)})
	}, 2*time.Minute)
	st = env.run(t)
	var app *temporal.ApplicationError
	require.ErrorAs(t, rescheduleErr, &app)
	require.Equal(t, workflows.ErrTypeTimerClosed, app.Type())
	require.Contains(t, app.Error(), "timer is cancelled; it cannot be rescheduled")
	require.Equal(t, courier.TimerCancelled, st.State)
	require.Empty(t, env.claims, "the run ended at the update's answer, before its fire time")
	require.Empty(t, env.delivered)
}

// A delivery that fails for good is recorded in the row, fails the run and notifies the type's
// failure target.
func TestRowTimerDeliveryFails(t *testing.T) {
	env := newRowEnv(t, time.Minute, func(int) error { return errors.New("receiver answered 503") })
	env.cfg.NotifyFailure = true
	st := env.run(t)
	require.Equal(t, courier.TimerFailed, st.State)
	require.Len(t, env.delivered, 3, "the business type's MaxAttempts")
	require.Equal(t, []contract.FinishTimerRunParams{{BizType: "orders", BizID: "o-1", Claim: env.claim, State: courier.TimerFailed,
		Attempts: 3, LastError: "receiver answered 503"}}, env.finished)
	require.Len(t, env.notified, 1)
	require.Equal(t, env.claim, env.notified[0].DeliveryID)
}

// A type that is gone at the fire time fails the timer (its row claimed, then ended failed);
// a row that is gone fails the run without a delivery.
func TestRowTimerWithoutItsTypeOrRow(t *testing.T) {
	env := newRowEnv(t, time.Minute, nil)
	env.unknown = true
	st := env.run(t)
	require.Equal(t, courier.TimerFailed, st.State)
	require.Contains(t, st.LastError, "no such type")
	require.Len(t, env.finished, 1)
	require.Equal(t, courier.TimerFailed, env.finished[0].State)
	require.Empty(t, env.delivered)

	env = newRowEnv(t, time.Minute, nil)
	fireAt := env.row.FireAt
	env.row = nil
	env.ExecuteWorkflow(courier.KindTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: fireAt})
	require.True(t, env.IsWorkflowCompleted())
	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	require.Equal(t, workflows.ErrTypeTimerFailed, app.Type())
	require.Contains(t, app.Error(), "row is gone")
	require.Empty(t, env.delivered)
}

// A run that took many changes hands its state to a fresh run of the same type.
func TestRowTimerContinuesAsNewAfterManyChanges(t *testing.T) {
	env := newRowEnv(t, time.Hour, nil)
	const n = 1000
	env.RegisterDelayedCallback(func() {
		for i := 1; i <= n; i++ {
			env.row.Version, env.row.FireAt = i, env.start.Add(2*time.Hour+time.Duration(i)*time.Second)
			env.SignalWorkflow(workflows.SignalChangeTimer, workflows.TimerChange{Version: i, FireAt: env.row.FireAt})
		}
	}, time.Minute)
	env.ExecuteWorkflow(courier.KindTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.row.FireAt, Payload: []byte(`{"k":1}`)})
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, courier.KindTimer.Workflow, can.WorkflowType.Name)
	var p workflows.TimerParams
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &p))
	require.Equal(t, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.row.FireAt.UTC(), Payload: []byte(`{"k":1}`),
		Version: n}, normalize(p))
	require.Empty(t, env.delivered)
}
