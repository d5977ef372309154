package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// attempt3V5 is attempt3 as the claimer starts it for a queue without a heartbeat timeout:
// the push is a local activity and the run waits for the outcome itself.
var attempt3V5 = func() workflows.TaskParams {
	p := attempt3
	p.V = workflows.TaskLocalPushV
	return p
}()

// localPushes records the pushes of version-5 runs: local activities, which the started
// listener does not see.
type localPushes struct {
	mu     sync.Mutex
	infos  []activity.Info
	params []contract.PushTaskParams
}

// push answers every push with err (nil: the worker accepted it).
func (l *localPushes) push(err error) func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) {
	return func(ctx context.Context, p contract.PushTaskParams) (contract.SendPushResult, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.infos = append(l.infos, activity.GetInfo(ctx))
		l.params = append(l.params, p)
		return contract.SendPushResult{Try: 1}, err
	}
}

// requirePushedLocally checks the attempt's push: a local activity with its tries within the
// attempt, bounded by the processing timeout, told the attempt's deadline, timeouts and the run's
// code version (which the push records in the row for the gateway).
func (l *localPushes) requirePushedLocally(t *testing.T, e *taskEnv, p workflows.TaskParams) {
	t.Helper()
	require.NotEmpty(t, l.infos)
	info, params := l.infos[0], l.params[0]
	require.True(t, info.IsLocalActivity, "the push is a local activity: no activity task")
	require.Equal(t, int32(courier.PushTries), info.RetryPolicy.MaximumAttempts, "tries that failed on the way are repeated within the attempt")
	require.WithinDuration(t, e.start.Add(p.ProcessingTimeout), params.Deadline, time.Second, "the worker is told the deadline the run enforces")
	require.Equal(t, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, PushTimeout: p.PushTimeout, Deadline: params.Deadline, V: workflows.TaskLocalPushV}, params)
}

// reportAfter hands the run a result as the gateway does, d after the run starts, and records
// whether the run refused it.
func reportAfter(t *testing.T, e *taskEnv, d time.Duration, r workflows.TaskResultParams, refused *bool) {
	e.RegisterDelayedCallback(func() {
		e.UpdateWorkflow(workflows.TaskResultUpdate, fmt.Sprintf("result-%d", r.Attempt), &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) { *refused = true }, OnComplete: func(any, error) {},
		}, r)
	}, d)
}

// A result the gateway recorded (handed over as the update, marked recorded) ends the run as the row says, without a finish of its own: a
// success with nothing more, a failure that goes back to pending with its state, a failure that
// leaves the task Failed by failing the run.
func TestLocalPushRecordedOutcomeEndsTheRun(t *testing.T) {
	success := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Result: json.RawMessage(`{"rows":42}`)}
	failure := courier.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 503, Message: "try later"}
	for _, c := range []struct {
		name   string
		out    courier.AttemptOutcome
		status courier.TaskStatus
		state  []string // CourierState upserts
	}{
		{"success", success, courier.TaskSuccess, nil},
		{"failure, retried", failure, courier.TaskPending, []string{string(courier.TaskPending)}},
		{"failure, attempts spent", failure, courier.TaskFailed, []string{string(courier.TaskFailed)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pushes localPushes
			env := newTaskEnv(t, pushes.push(nil), nil)
			recorded := c.out
			recorded.Recorded = true
			// One for another attempt first: it is refused and changes nothing.
			var staleRefused, refused bool
			reportAfter(t, env, time.Second, workflows.TaskResultParams{Attempt: 2, Outcome: recorded, Status: courier.TaskCancelled}, &staleRefused)
			reportAfter(t, env, 2*time.Second, workflows.TaskResultParams{Attempt: 3, Outcome: recorded, Status: c.status}, &refused)

			res := env.run(t, attempt3V5)

			require.True(t, staleRefused, "a result for another attempt is refused")
			require.False(t, refused)
			require.Empty(t, env.finishes, "the gateway recorded it: nothing left to record")
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: c.status, Outcome: recorded}, noResultIsNilRun(res))
			require.Equal(t, c.state, states(env))
			require.Empty(t, env.pushAwaits, "no activity")
			require.Empty(t, env.waits, "no activity")
			pushes.requirePushedLocally(t, env, attempt3V5)
		})
	}
}

// An outcome the run records itself: a result the gateway could not record (an update), the
// processing deadline, a push the worker refused, a cancel.
func TestLocalPushEndingsAreFinishedAsOutcomes(t *testing.T) {
	reported := courier.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 422, Message: "corrupt file"}
	for _, c := range []struct {
		name    string
		pushErr error
		act     func(e *taskEnv)
		want    courier.AttemptOutcome
		after   time.Duration // when (virtual time) the finish runs
	}{
		{"unrecorded result, as an update", nil, func(e *taskEnv) {
			e.RegisterDelayedCallback(func() {
				e.UpdateWorkflow(workflows.TaskResultUpdate, "result-3", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { t.Errorf("rejected: %v", err) }, OnComplete: func(any, error) {},
				}, workflows.TaskResultParams{Attempt: 3, Outcome: reported})
			}, time.Minute)
		}, reported, time.Minute},
		{"processing deadline", nil, func(*taskEnv) {},
			courier.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: "processing timeout: no result within 10m0s"}, 10 * time.Minute},
		{"push refused", temporal.NewNonRetryableApplicationError("push: worker answered 422 (not retried)", contract.ErrTypePushFailed, nil), func(*taskEnv) {},
			courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "push: worker answered 422 (not retried)"}, 0},
		{"cancelled while waiting", nil, func(e *taskEnv) { e.RegisterDelayedCallback(e.CancelWorkflow, time.Minute) },
			courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}, time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pushes localPushes
			env := newTaskEnv(t, pushes.push(c.pushErr), nil)
			c.act(env)

			env.run(t, attempt3V5)

			require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: c.want}}, env.finishes)
			env.requireFinishedLocally(t)
			require.InDelta(t, c.after.Seconds(), env.finishAt[0].Sub(env.start).Seconds(), 1)
			pushes.requirePushedLocally(t, env, attempt3V5)
		})
	}
}

// A push that finds the task moved on records nothing.
func TestLocalPushStaleAttemptTouchesNothing(t *testing.T) {
	var pushes localPushes
	env := newTaskEnv(t, pushes.push(temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", contract.ErrTypeTaskStale, nil)), nil)
	res := env.run(t, attempt3V5)
	require.Equal(t, workflows.TaskRunResult{Stale: true}, res)
	require.Empty(t, env.finishes)
	require.Empty(t, env.upserts)
}

// states lists the CourierState values the run upserted.
func states(e *taskEnv) []string {
	var out []string
	for _, sa := range e.upserts {
		if v, ok := sa.GetKeyword(stateKey); ok {
			out = append(out, v)
		}
	}
	return out
}

// noResultIsNilRun normalises a run result's empty worker result.
func noResultIsNilRun(r workflows.TaskRunResult) workflows.TaskRunResult {
	r.Outcome = noResultIsNil(r.Outcome)
	return r
}
