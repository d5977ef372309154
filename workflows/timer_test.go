package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
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

var bizCfg = contract.BizTypeDelivery{
	TaskQueue: "courier-biz-orders", InitialInterval: 10 * time.Second, Backoff: 1, MaxInterval: 10 * time.Second, MaxAttempts: 3,
}

type timerEnv struct {
	*testsuite.TestWorkflowEnvironment
	start     time.Time
	delivered []time.Time
}

// newTimerEnv runs the timer workflow with the business-type lookup and the delivery mocked;
// deliver decides each attempt's outcome.
func newTimerEnv(t *testing.T, deliver func(n int) error) *timerEnv {
	var s testsuite.WorkflowTestSuite
	env := &timerEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	env.RegisterWorkflowWithOptions(workflows.Timer, workflow.RegisterOptions{Name: courier.KindRowlessTimer.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, string) (contract.BizTypeDelivery, error) { return bizCfg, nil },
		activity.RegisterOptions{Name: contract.LoadBizTypeName})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerParams) (int, error) { return 0, nil },
		activity.RegisterOptions{Name: contract.DeliverTimerName})
	n := 0
	env.OnActivity(contract.DeliverTimerName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.DeliverTimerParams) (int, error) {
			n++
			env.delivered = append(env.delivered, env.Now())
			if deliver != nil {
				if err := deliver(n); err != nil {
					return 0, err
				}
			}
			return n, nil
		}).Maybe()
	env.start = env.Now()
	return env
}

func (e *timerEnv) run(t *testing.T, in time.Duration) workflows.TimerSnapshot {
	e.ExecuteWorkflow(courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: e.start.Add(in), Payload: []byte(`{}`)})
	require.True(t, e.IsWorkflowCompleted())
	var st workflows.TimerSnapshot
	// A failed delivery ends the run Failed, with the last error as the message and the state
	// in the details; every other outcome completes with the state as the result.
	var app *temporal.ApplicationError
	if errors.As(e.GetWorkflowError(), &app) && app.Type() == workflows.ErrTypeTimerFailed {
		require.True(t, app.NonRetryable())
		require.NoError(t, app.Details(&st))
		require.Equal(t, courier.TimerFailed, st.State)
		require.Equal(t, st.LastError, app.Message(), "the failure message is the reason")
		return st
	}
	require.NoError(t, e.GetWorkflowError())
	require.NoError(t, e.GetWorkflowResult(&st))
	require.NotEqual(t, courier.TimerFailed, st.State, "a failed timer's run fails")
	return st
}

// update sends an update at a virtual time offset and records whether it was accepted.
func (e *timerEnv) update(at time.Duration, name string, rejected *error, args ...any) {
	e.RegisterDelayedCallback(func() {
		e.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *rejected = err },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		}, args...)
	}, at)
}

func TestTimerFiresOnTimeNeverEarly(t *testing.T) {
	env := newTimerEnv(t, nil)
	st := env.run(t, 30*time.Minute)
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Len(t, env.delivered, 1)
	require.False(t, env.delivered[0].Before(env.start.Add(30*time.Minute)), "never early")
	require.Less(t, env.delivered[0].Sub(env.start.Add(30*time.Minute)), time.Second)
	require.Equal(t, 1, st.Attempts)
}

func TestTimerRescheduleLaterAndEarlier(t *testing.T) {
	for name, tc := range map[string]struct{ to time.Duration }{"later": {2 * time.Hour}, "earlier": {10 * time.Minute}} {
		t.Run(name, func(t *testing.T) {
			env := newTimerEnv(t, nil)
			var rejected error
			env.update(5*time.Minute, workflows.UpdateReschedule, &rejected, workflows.RescheduleRequest{FireAt: env.start.Add(tc.to)})
			st := env.run(t, time.Hour)
			require.NoError(t, rejected)
			require.Equal(t, courier.TimerDelivered, st.State)
			require.Len(t, env.delivered, 1, "the old fire time is void")
			require.False(t, env.delivered[0].Before(env.start.Add(tc.to)))
			require.Less(t, env.delivered[0].Sub(env.start.Add(tc.to)), time.Second)
			require.Equal(t, 1, st.Version)
		})
	}
}

// Once the timer has fired, a reschedule is refused and says why.
func TestTimerRescheduleAfterFireIsRefused(t *testing.T) {
	env := newTimerEnv(t, func(n int) error {
		if n < 3 {
			return errors.New("receiver down")
		}
		return nil
	})
	var rejected error
	env.update(time.Hour+5*time.Second, workflows.UpdateReschedule, &rejected, workflows.RescheduleRequest{FireAt: env.start.Add(3 * time.Hour)})
	st := env.run(t, time.Hour)
	require.Error(t, rejected)
	require.Contains(t, rejected.Error(), "timer is firing; it cannot be rescheduled")
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Len(t, env.delivered, 3)
}

func TestTimerCancelBeforeAndJustBeforeFire(t *testing.T) {
	for name, at := range map[string]time.Duration{"well before": 5 * time.Minute, "just before": time.Hour - time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			env := newTimerEnv(t, nil)
			var rejected error
			env.update(at, workflows.UpdateCancel, &rejected)
			st := env.run(t, time.Hour)
			require.NoError(t, rejected)
			require.Equal(t, courier.TimerCancelled, st.State)
			require.Empty(t, env.delivered, "an acknowledged cancel never fires")
		})
	}
}

// A cancel that arrives after the fire time is refused: the caller learns it fired.
func TestTimerCancelAfterFireIsRefused(t *testing.T) {
	env := newTimerEnv(t, func(n int) error {
		if n < 2 {
			return errors.New("receiver down")
		}
		return nil
	})
	var rejected error
	env.update(time.Hour+time.Second, workflows.UpdateCancel, &rejected)
	st := env.run(t, time.Hour)
	require.Error(t, rejected)
	require.Equal(t, courier.TimerDelivered, st.State)
}

func TestTimerDeliveryRetriesThenFails(t *testing.T) {
	env := newTimerEnv(t, func(int) error { return errors.New("receiver answered 503") })
	st := env.run(t, time.Minute)
	require.Equal(t, courier.TimerFailed, st.State)
	require.Len(t, env.delivered, 3, "the business type's MaxAttempts")
	require.Contains(t, st.LastError, "503")
	require.GreaterOrEqual(t, env.delivered[2].Sub(env.delivered[0]), 20*time.Second, "retries wait per the policy")
}

func TestTimerStateQuery(t *testing.T) {
	env := newTimerEnv(t, nil)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryTimerState)
		require.NoError(t, err)
		var st workflows.TimerSnapshot
		require.NoError(t, v.Get(&st))
		require.Equal(t, courier.TimerScheduled, st.State)
		require.True(t, env.start.Add(time.Hour).Equal(st.FireAt))
	}, 10*time.Minute)
	env.run(t, time.Hour)
}

// continuedWith returns the input of the run a timer continued as new into; it fails the test
// if the workflow did not continue as new.
func continuedWith(t *testing.T, e *timerEnv) workflows.TimerParams {
	t.Helper()
	require.True(t, e.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, e.GetWorkflowError(), &can, "the timer continues as new")
	require.Equal(t, courier.KindRowlessTimer.Workflow, can.WorkflowType.Name)
	var p workflows.TimerParams
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &p))
	return p
}

// When the server suggests it (it does as a run nears its update or history limits), a
// rescheduled timer hands its state to a fresh run instead of firing in this one.
func TestTimerContinuesAsNewWhenSuggested(t *testing.T) {
	env := newTimerEnv(t, nil)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 4*time.Minute)
	var rejected error
	env.update(5*time.Minute, workflows.UpdateReschedule, &rejected, workflows.RescheduleRequest{FireAt: env.start.Add(2 * time.Hour)})
	env.ExecuteWorkflow(courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.start.Add(time.Hour), Payload: []byte(`{"k":1}`)})
	require.NoError(t, rejected)
	p := continuedWith(t, env)
	require.Equal(t, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.start.Add(2 * time.Hour).UTC(),
		Payload: []byte(`{"k":1}`), Version: 1}, normalize(p))
	require.Empty(t, env.delivered, "the old run never fires")
}

// Without a suggestion, a run still hands over after a bounded number of changes, so a server
// whose suggestion is off never reaches its per-run update limit.
func TestTimerContinuesAsNewAfterManyReschedules(t *testing.T) {
	env := newTimerEnv(t, nil)
	const n, perCallback = 1000, 10 // the test environment queues at most 1,000 callbacks
	rejected := make([]error, n)
	for c := range n / perCallback {
		env.RegisterDelayedCallback(func() {
			for i := c * perCallback; i < (c+1)*perCallback; i++ {
				env.UpdateWorkflow(workflows.UpdateReschedule, "", &testsuite.TestUpdateCallback{
					OnReject: func(err error) { rejected[i] = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
				}, workflows.RescheduleRequest{FireAt: env.start.Add(2*time.Hour + time.Duration(i)*time.Second)})
			}
		}, time.Duration(c+1)*time.Second)
	}
	env.ExecuteWorkflow(courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.start.Add(time.Hour), Payload: []byte(`{}`)})
	for i, err := range rejected {
		require.NoError(t, err, "reschedule %d", i)
	}
	p := continuedWith(t, env)
	require.Equal(t, n, p.Version)
	require.True(t, env.start.Add(2*time.Hour+(n-1)*time.Second).Equal(p.FireAt), "the last fire time is carried")
	require.Empty(t, env.delivered)
}

// A run that accepted no change never continues as new, even when the server keeps suggesting
// it: there is nothing to shed, and a chain of empty runs would never end.
func TestTimerDoesNotContinueAsNewWithoutChanges(t *testing.T) {
	env := newTimerEnv(t, nil)
	env.SetContinueAsNewSuggested(true)
	st := env.run(t, time.Hour)
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Len(t, env.delivered, 1)
}

// A continued run picks up where the last one stopped: its version keeps rising and a cancel
// still wins.
func TestTimerContinuedRunCancels(t *testing.T) {
	env := newTimerEnv(t, nil)
	var rejected error
	env.update(time.Minute, workflows.UpdateCancel, &rejected)
	env.ExecuteWorkflow(courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: env.start.Add(time.Hour), Payload: []byte(`{}`), Version: 41})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.TimerSnapshot
	require.NoError(t, env.GetWorkflowResult(&st))
	require.NoError(t, rejected)
	require.Equal(t, courier.TimerCancelled, st.State)
	require.Equal(t, 42, st.Version)
	require.Empty(t, env.delivered)
}

func normalize(p workflows.TimerParams) workflows.TimerParams {
	p.FireAt = p.FireAt.UTC()
	return p
}

// handOverEnv runs a bucketed timer's own run (TimerParams.HandOver) with its activities
// mocked: the type's config (notify as given), deliveries answered by deliver, and what the run
// records in the row and sends as a failure event.
type handOverEnv struct {
	*testsuite.TestWorkflowEnvironment
	delivered []time.Time
	recorded  []contract.RecordTimerResultParams
	notified  []contract.NotifyTimerFailureParams
}

func newHandOverEnv(t *testing.T, notify bool, deliver func(n int) error) *handOverEnv {
	var s testsuite.WorkflowTestSuite
	env := &handOverEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	cfg := bizCfg
	cfg.NotifyFailure = notify
	env.RegisterWorkflowWithOptions(workflows.Timer, workflow.RegisterOptions{Name: courier.KindRowlessTimer.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, string) (contract.BizTypeDelivery, error) { return cfg, nil },
		activity.RegisterOptions{Name: contract.LoadBizTypeName})
	n := 0
	env.RegisterActivityWithOptions(func(ctx context.Context, p contract.DeliverTimerParams) (int, error) {
		n++
		env.delivered = append(env.delivered, env.Now())
		require.Equal(t, "bucket-claim/o-1", p.DeliveryID, "the bucket's delivery id is kept")
		if err := deliver(n); err != nil {
			return 0, temporal.NewApplicationErrorWithOptions(err.Error(), contract.ErrTypeRetryableDelivery,
				temporal.ApplicationErrorOptions{Details: []any{contract.DeliveryAttempt{Attempt: int(activity.GetInfo(ctx).Attempt)}}})
		}
		return int(activity.GetInfo(ctx).Attempt), nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.RecordTimerResultParams) error {
		env.recorded = append(env.recorded, p)
		return nil
	}, activity.RegisterOptions{Name: contract.RecordTimerResultName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.NotifyTimerFailureParams) error {
		env.notified = append(env.notified, p)
		return nil
	}, activity.RegisterOptions{Name: contract.NotifyTimerFailureName})
	return env
}

func (e *handOverEnv) run(h workflows.TimerHandOver) workflows.TimerSnapshot {
	h.DeliveryID = "bucket-claim/o-1"
	e.ExecuteWorkflow(courier.KindRowlessTimer.Workflow, workflows.TimerParams{BizType: "orders", BizID: "o-1", FireAt: e.Now(), HandOver: &h})
	var st workflows.TimerSnapshot
	var app *temporal.ApplicationError
	if errors.As(e.GetWorkflowError(), &app) {
		_ = app.Details(&st)
		return st
	}
	_ = e.GetWorkflowResult(&st)
	return st
}

// A bucketed timer's run waits the first backoff after its bucket's attempt, makes the rest of
// the budget's attempts and records the end in the row, counting the bucket's attempt.
func TestTimerHandOverRetriesTheRestOfTheBudget(t *testing.T) {
	env := newHandOverEnv(t, false, func(n int) error {
		if n == 1 {
			return errors.New("503")
		}
		return nil
	})
	start := env.Now()
	st := env.run(workflows.TimerHandOver{Attempts: 1, LastError: "503"})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, courier.TimerDelivered, st.State)
	require.Equal(t, 3, st.Attempts, "the bucket's attempt and two of the run's")
	require.Len(t, env.delivered, 2)
	require.GreaterOrEqual(t, env.delivered[0].Sub(start), bizCfg.InitialInterval, "the first backoff after the bucket's attempt")
	require.Equal(t, []contract.RecordTimerResultParams{{BizType: "orders", BizID: "o-1", State: courier.TimerDelivered, Attempts: 3}}, env.recorded)
	require.Empty(t, env.notified)
}

// When the rest of the budget fails too, the timer fails for good with every attempt counted,
// the row records it, and its type's failure target hears of it.
func TestTimerHandOverFailsAndNotifies(t *testing.T) {
	env := newHandOverEnv(t, true, func(int) error { return errors.New("503 again") })
	st := env.run(workflows.TimerHandOver{Attempts: 1, LastError: "503"})
	require.ErrorContains(t, env.GetWorkflowError(), "503 again")
	require.Equal(t, courier.TimerFailed, st.State)
	require.Equal(t, 3, st.Attempts, "the bucket's attempt and the two left of a budget of three")
	require.Len(t, env.recorded, 1)
	require.Equal(t, courier.TimerFailed, env.recorded[0].State)
	require.Equal(t, 3, env.recorded[0].Attempts)
	require.Len(t, env.notified, 1)
	require.Equal(t, contract.NotifyTimerFailureParams{BizType: "orders", BizID: "o-1", FireAt: env.notified[0].FireAt, Attempts: 3,
		LastError: "503 again", DeliveryID: "bucket-claim/o-1"}, env.notified[0])
}

// A refusal in the bucket (permanent) is not retried: the run fails the timer at once.
func TestTimerHandOverPermanentFailure(t *testing.T) {
	env := newHandOverEnv(t, false, func(int) error { t.Fatal("a refused timer is not delivered again"); return nil })
	st := env.run(workflows.TimerHandOver{Attempts: 1, LastError: "callback answered 410", Permanent: true})
	require.Equal(t, courier.TimerFailed, st.State)
	require.Equal(t, 1, st.Attempts)
	require.Equal(t, "callback answered 410", st.LastError)
	require.Len(t, env.recorded, 1)
}
