package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// attempt3 is one attempt as the claimer starts it for a queue without a heartbeat timeout: the
// third attempt of version 2. Its push is a local activity and the run waits for the result
// itself.
var attempt3 = workflows.TaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Queue: "default", Priority: 3,
	ProcessingTimeout: 10 * time.Minute, PushTimeout: 20 * time.Second}

// attempt3Heartbeat is attempt3 on a queue with a heartbeat timeout: one activity pushes and
// waits for the result.
var attempt3Heartbeat = func() workflows.TaskParams {
	p := attempt3
	p.HeartbeatTimeout = 30 * time.Second
	return p
}()

// testQueue is the test environment's task queue: the attempts' own queue in these tests.
const testQueue = "default-test-taskqueue"

var stateKey = temporal.NewSearchAttributeKeyKeyword(courier.SAState)

type taskEnv struct {
	*testsuite.TestWorkflowEnvironment
	start time.Time // virtual time when the workflow was set up
	// finish answers each Finish call; by default the row took the outcome (Applied) and
	// moved to the status the outcome leads to with retries left.
	finish func(contract.FinishTaskParams) (contract.FinishTaskResult, error)

	mu              sync.Mutex
	pushes          []activity.Info             // how each try of a local push was scheduled
	pushParams      []contract.PushTaskParams   // what each try of a local push was started with
	pushAt          []time.Time                 // when (virtual time) each try of a local push started
	pushAwaits      []activity.Info             // how each push-and-wait was scheduled
	pushAwaitParams []contract.PushTaskParams   // what each push-and-wait was started with
	finishes        []contract.FinishTaskParams // what each Finish was started with
	finishInfo      []activity.Info             // how each Finish was scheduled
	finishAt        []time.Time                 // when (virtual time) each Finish started
	upserts         []temporal.SearchAttributes // the workflow's search-attribute upserts

	finishMock *testsuite.MockCallWrapper // the Finish mock, for a test to delay it
}

// newTaskEnv runs the task workflows with the pushes answered by the tests' mocks (onPush,
// onPushAwait) and Finish answered by env.finish; it records how each activity was scheduled,
// what it was started with, and the search-attribute upserts.
func newTaskEnv(t *testing.T) *taskEnv {
	var s testsuite.WorkflowTestSuite
	env := &taskEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	env.start = env.Now()
	workflows.Register(env)
	unmocked := func(name string) error {
		t.Errorf("%s ran without a mock", name)
		return fmt.Errorf("unmocked %s", name)
	}
	env.RegisterActivityWithOptions(func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) {
		return contract.SendPushResult{}, unmocked("the push")
	}, activity.RegisterOptions{Name: contract.SendPushName})
	env.RegisterActivityWithOptions(func(context.Context, contract.PushTaskParams) (contract.AttemptResult, error) {
		return contract.AttemptResult{}, unmocked("the push-and-wait")
	}, activity.RegisterOptions{Name: contract.PushAwaitName})
	env.RegisterActivityWithOptions(func(context.Context, contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{}, nil
	}, activity.RegisterOptions{Name: contract.FinishTaskName})
	env.RegisterActivityWithOptions(func(context.Context, contract.SweepParams) (contract.SweepResult, error) {
		return contract.SweepResult{}, nil
	}, activity.RegisterOptions{Name: contract.SweepTasksName})

	env.finish = func(p contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		st := courier.TaskPending
		switch p.Outcome.Kind {
		case courier.OutcomeSuccess:
			st = courier.TaskSuccess
		case courier.OutcomeCancelled:
			st = courier.TaskCancelled
		}
		return contract.FinishTaskResult{Applied: true, Status: st}, nil
	}
	env.finishMock = env.OnActivity(contract.FinishTaskName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.FinishTaskParams) (contract.FinishTaskResult, error) {
			env.mu.Lock()
			rec := p
			rec.Outcome = noResultIsNil(rec.Outcome)
			env.finishes = append(env.finishes, rec)
			env.finishInfo = append(env.finishInfo, activity.GetInfo(ctx))
			env.finishAt = append(env.finishAt, env.Now())
			env.mu.Unlock()
			return env.finish(p)
		}).Maybe()
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		env.mu.Lock()
		env.upserts = append(env.upserts, args.Get(0).(temporal.SearchAttributes))
		env.mu.Unlock()
	}).Maybe()
	return env
}

// onPush answers each try of the local push (try counts from 1) and records it.
func (e *taskEnv) onPush(answer func(try int) (contract.SendPushResult, error)) *testsuite.MockCallWrapper {
	return e.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.PushTaskParams) (contract.SendPushResult, error) {
			e.mu.Lock()
			e.pushes = append(e.pushes, activity.GetInfo(ctx))
			e.pushParams = append(e.pushParams, p)
			e.pushAt = append(e.pushAt, e.Now())
			try := len(e.pushes)
			e.mu.Unlock()
			return answer(try)
		})
}

// accepted is a push the worker accepted at its first try.
func accepted(int) (contract.SendPushResult, error) { return contract.SendPushResult{Try: 1}, nil }

// onPushAwait answers the push-and-wait of an attempt with a heartbeat timeout and records it.
func (e *taskEnv) onPushAwait(answer func(ctx context.Context) (contract.AttemptResult, error)) *testsuite.MockCallWrapper {
	return e.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.PushTaskParams) (contract.AttemptResult, error) {
			e.mu.Lock()
			e.pushAwaits = append(e.pushAwaits, activity.GetInfo(ctx))
			e.pushAwaitParams = append(e.pushAwaitParams, p)
			e.mu.Unlock()
			return answer(ctx)
		})
}

// completed is a push-and-wait the gateway completed with r.
func completed(r contract.AttemptResult) func(context.Context) (contract.AttemptResult, error) {
	return func(context.Context) (contract.AttemptResult, error) { return r, nil }
}

// run executes one attempt and returns its result; the workflow must end without an error,
// unless the attempt left its task Failed: then the run fails with the attempt's message and
// the result in the details.
func (e *taskEnv) run(t *testing.T, p workflows.TaskParams) workflows.TaskRunResult {
	t.Helper()
	e.ExecuteWorkflow(courier.KindTask.Workflow, p)
	require.True(t, e.IsWorkflowCompleted())
	var res workflows.TaskRunResult
	var app *temporal.ApplicationError
	if errors.As(e.GetWorkflowError(), &app) && app.Type() == workflows.ErrTypeTaskFailed {
		require.True(t, app.NonRetryable())
		require.NoError(t, app.Details(&res))
		require.True(t, res.Applied)
		require.Equal(t, courier.TaskFailed, res.Status)
		require.Equal(t, res.Outcome.Message, app.Message(), "the failure message is the reason")
	} else {
		require.NoError(t, e.GetWorkflowError())
		require.NoError(t, e.GetWorkflowResult(&res))
		require.False(t, res.Applied && res.Status == courier.TaskFailed, "a failed task's run fails")
	}
	res.Outcome = noResultIsNil(res.Outcome)
	return res
}

// report hands the run a result as the gateway does (TaskResultUpdate), at the given virtual
// time, and records the error the run refused it with (nil: taken).
func (e *taskEnv) report(at time.Duration, r contract.AttemptResult, refused *error) {
	e.RegisterDelayedCallback(func() {
		e.UpdateWorkflow(workflows.TaskResultUpdate, fmt.Sprintf("result-%d", r.Attempt), &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *refused = err },
			OnAccept:   func() {},
			OnComplete: func(_ any, err error) { *refused = err },
		}, r)
	}, at)
}

// noResultIsNil maps the JSON null that an absent result becomes on its way through the data
// converter back to nil, so outcomes compare with the ones the tests build.
func noResultIsNil(o contract.AttemptOutcome) contract.AttemptOutcome {
	if string(o.Result) == "null" {
		o.Result = nil
	}
	return o
}

// upsertedStates lists the task statuses the workflow wrote to its search attribute.
func (e *taskEnv) upsertedStates(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, sa := range e.upserts {
		v, ok := sa.GetKeyword(stateKey)
		require.True(t, ok, "an upsert without the state attribute")
		out = append(out, v)
	}
	return out
}

// requirePushedLocally checks the attempt's push: a local activity (no activity task), its
// tries within the attempt, each bounded by the push timeout and all by the processing
// timeout, told the attempt's deadline and timeouts; and no push-and-wait.
func (e *taskEnv) requirePushedLocally(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.NotEmpty(t, e.pushes)
	require.Empty(t, e.pushAwaits, "no activity")
	info, params := e.pushes[0], e.pushParams[0]
	require.True(t, info.IsLocalActivity, "the push is a local activity: no activity task")
	require.Equal(t, int32(courier.PushTries), info.RetryPolicy.MaximumAttempts, "tries that failed on the way are repeated within the attempt")
	require.Equal(t, p.ProcessingTimeout, info.ScheduleToCloseTimeout, "tries never run past the processing deadline")
	require.Equal(t, p.PushTimeout+10*time.Second, info.StartToCloseTimeout, "one try: the push timeout (the HTTP client's) and a margin")
	require.True(t, e.start.Add(p.ProcessingTimeout).Equal(params.Deadline), "the worker is told the deadline the run enforces")
	require.Equal(t, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, PushTimeout: p.PushTimeout, Deadline: params.Deadline}, params)
	for _, q := range e.pushParams {
		require.Equal(t, params, q, "every try tells the worker the same")
	}
}

// requirePushAwaitedOnce checks the attempt's one activity: on the run's own queue (eager
// dispatch), addressed by the attempt's activity id (the gateway completes it with the
// result), bounded by the processing timeout in all, with the heartbeat timeout, told the
// attempt's deadline and timeouts; and no local push.
func (e *taskEnv) requirePushAwaitedOnce(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.Len(t, e.pushAwaits, 1, "one activity per attempt; retries go back through the queue")
	require.Empty(t, e.pushes, "no local push")
	info, params := e.pushAwaits[0], e.pushAwaitParams[0]
	require.False(t, info.IsLocalActivity)
	require.Equal(t, testQueue, info.TaskQueue, "the push-and-wait is on the run's own queue")
	require.Equal(t, courier.TaskAttemptActivityID(p.Attempt), info.ActivityID, "the result and heartbeat callbacks address it by this id")
	require.Equal(t, p.ProcessingTimeout, info.ScheduleToCloseTimeout, "the attempt never runs past the processing deadline")
	require.Equal(t, p.ProcessingTimeout, info.StartToCloseTimeout)
	require.Equal(t, p.HeartbeatTimeout, info.HeartbeatTimeout)
	require.Equal(t, int32(1), info.Attempt)
	require.Equal(t, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout, PushTimeout: p.PushTimeout,
		Deadline: params.Deadline}, params)
	require.True(t, e.start.Add(p.ProcessingTimeout).Equal(params.Deadline), "the worker is told the deadline Temporal enforces")
}

// requireFinishedLocally checks every finish ran as a local activity.
func (e *taskEnv) requireFinishedLocally(t *testing.T) {
	t.Helper()
	require.NotEmpty(t, e.finishInfo)
	for _, info := range e.finishInfo {
		require.True(t, info.IsLocalActivity, "the outcome is recorded in a local activity: one marker, no extra workflow task")
	}
}

// A result the gateway recorded in the row ends the run as the row says, without a finish of
// its own: a success with nothing more, a failure that goes back to pending with its state, a
// failure that leaves the task Failed by failing the run. An attempt without a heartbeat timeout
// takes it as the update (one for another attempt is refused and changes nothing); one with a
// heartbeat timeout as the completion of its push-and-wait.
func TestTaskRecordedOutcomeEndsTheRun(t *testing.T) {
	success := contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Result: json.RawMessage(`{"rows":42}`), Recorded: true}
	failure := contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 503, Message: "try later", Recorded: true}
	for _, c := range []struct {
		name   string
		out    contract.AttemptOutcome
		status courier.TaskStatus
		states []string // CourierState upserts
	}{
		{"success", success, courier.TaskSuccess, nil},
		{"failure, retried", failure, courier.TaskPending, []string{string(courier.TaskPending)}},
		{"failure, attempts spent", failure, courier.TaskFailed, []string{string(courier.TaskFailed)}},
	} {
		want := workflows.TaskRunResult{Applied: true, Status: c.status, Outcome: c.out}
		t.Run(c.name+", update", func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(accepted)
			var staleRefused, refused error
			env.report(time.Second, contract.AttemptResult{Attempt: 2, Outcome: c.out, Status: courier.TaskCancelled}, &staleRefused)
			env.report(2*time.Second, contract.AttemptResult{Attempt: 3, Outcome: c.out, Status: c.status}, &refused)

			res := env.run(t, attempt3)

			var app *temporal.ApplicationError
			require.ErrorAs(t, staleRefused, &app, "a result for another attempt is refused")
			require.Equal(t, workflows.ErrTypeAttemptOver, app.Type())
			require.NoError(t, refused)
			require.Empty(t, env.finishes, "the gateway recorded it: nothing left to record")
			require.Equal(t, want, res)
			require.Equal(t, c.states, env.upsertedStates(t))
			env.requirePushedLocally(t, attempt3)
		})
		t.Run(c.name+", heartbeat timeout", func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPushAwait(completed(contract.AttemptResult{Attempt: 3, Outcome: c.out, Status: c.status}))

			res := env.run(t, attempt3Heartbeat)

			require.Empty(t, env.finishes, "the gateway recorded it: nothing left to record")
			require.Equal(t, want, res)
			require.Equal(t, c.states, env.upsertedStates(t))
			env.requirePushAwaitedOnce(t, attempt3Heartbeat)
		})
	}
}

// A result the gateway could not record is recorded by the run as reported, a report of a kind
// the workflow does not know as a failure with the worker's details kept; the workflow ends
// with the status Finish chose.
func TestTaskUnrecordedResultIsFinished(t *testing.T) {
	for name, tc := range map[string]struct {
		kind, want courier.OutcomeKind
		status     courier.TaskStatus
	}{
		"success":                   {courier.OutcomeSuccess, courier.OutcomeSuccess, courier.TaskSuccess},
		"failure with retries left": {courier.OutcomeFailure, courier.OutcomeFailure, courier.TaskPending},
		"unknown kind is a failure": {"exploded", courier.OutcomeFailure, courier.TaskPending},
		"empty kind is a failure":   {"", courier.OutcomeFailure, courier.TaskPending},
		"failure, retries spent":    {courier.OutcomeFailure, courier.OutcomeFailure, courier.TaskFailed},
	} {
		reported := contract.AttemptOutcome{Kind: tc.kind, StatusCode: 503, Message: "upstream down", Result: json.RawMessage(`{"retry":true}`)}
		want := reported
		want.Kind = tc.want
		var states []string
		if tc.status != courier.TaskSuccess {
			states = []string{string(tc.status)}
		}
		check := func(t *testing.T, env *taskEnv, res workflows.TaskRunResult) {
			require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: want}}, env.finishes)
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: tc.status, Outcome: want}, res)
			require.Equal(t, states, env.upsertedStates(t), "a success writes no state: the run's completion says it")
			env.requireFinishedLocally(t)
		}
		t.Run(name+", update", func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(accepted)
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: true, Status: tc.status}, nil
			}
			var refused error
			env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: reported}, &refused)

			res := env.run(t, attempt3)

			require.NoError(t, refused)
			check(t, env, res)
			require.InDelta(t, time.Minute.Seconds(), env.finishAt[0].Sub(env.start).Seconds(), 1, "finished on the result")
		})
		t.Run(name+", heartbeat timeout", func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPushAwait(completed(contract.AttemptResult{Attempt: 3, Outcome: reported}))
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: true, Status: tc.status}, nil
			}

			res := env.run(t, attempt3Heartbeat)

			check(t, env, res)
			env.requirePushAwaitedOnce(t, attempt3Heartbeat)
		})
	}
}

// An attempt without a heartbeat timeout that hears nothing times out at its processing
// deadline, on the run's timer; one whose push was refused (a 4xx answer, a blocked address, no
// push_url) fails at once, after one try.
func TestTaskLocalPushEndingsAreFinishedAsOutcomes(t *testing.T) {
	for _, c := range []struct {
		name    string
		pushErr error
		want    contract.AttemptOutcome
		after   time.Duration // when (virtual time) the finish runs
	}{
		{"processing deadline", nil,
			contract.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: "processing timeout: no result within 10m0s"}, 10 * time.Minute},
		{"push refused", temporal.NewNonRetryableApplicationError("push: worker answered 422 (not retried)", contract.ErrTypePushFailed, nil),
			contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "push: worker answered 422 (not retried)"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(func(int) (contract.SendPushResult, error) { return contract.SendPushResult{Try: 1}, c.pushErr })

			res := env.run(t, attempt3)

			require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: c.want}}, env.finishes)
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskPending, Outcome: c.want}, res)
			require.Equal(t, []string{string(courier.TaskPending)}, env.upsertedStates(t))
			env.requireFinishedLocally(t)
			require.InDelta(t, c.after.Seconds(), env.finishAt[0].Sub(env.start).Seconds(), 1)
			env.requirePushedLocally(t, attempt3)
			require.Len(t, env.pushes, 1)
		})
	}
}

// A run started without a push timeout (the queue's default applies) pushes with the default
// one.
func TestTaskWithoutPushTimeoutUsesTheDefault(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted)
	env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}, new(error))
	p := attempt3
	p.PushTimeout = 0

	env.run(t, p)

	require.Len(t, env.pushParams, 1)
	require.Equal(t, courier.DefaultPushTimeout, env.pushParams[0].PushTimeout)
	require.Equal(t, courier.DefaultPushTimeout+10*time.Second, env.pushes[0].StartToCloseTimeout)
}

// A push try that failed on the way (no connection, no answer, 429 or 5xx) is tried again
// within the attempt, after the worker's Retry-After when it sent one; once a try is accepted,
// the attempt waits for its result as usual.
func TestTaskUnansweredPushIsTriedAgainWithinTheAttempt(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(func(try int) (contract.SendPushResult, error) {
		switch try {
		case 1:
			return contract.SendPushResult{}, temporal.NewApplicationError("push: callback: connection refused", contract.ErrTypePushUnanswered)
		case 2:
			return contract.SendPushResult{}, temporal.NewApplicationErrorWithOptions("push: worker answered 429",
				contract.ErrTypePushUnanswered, temporal.ApplicationErrorOptions{NextRetryDelay: 45 * time.Second})
		}
		return contract.SendPushResult{Try: 3}, nil
	})
	won := contract.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "third time lucky", Recorded: true}
	env.report(5*time.Minute, contract.AttemptResult{Attempt: 3, Outcome: won, Status: courier.TaskSuccess}, new(error))

	res := env.run(t, attempt3)

	require.Len(t, env.pushes, 3)
	require.Equal(t, won, res.Outcome)
	require.GreaterOrEqual(t, env.pushAt[2].Sub(env.pushAt[1]), 45*time.Second, "the worker's Retry-After is honoured")
	env.requirePushedLocally(t, attempt3)
}

// A push whose tries keep failing on the way fails the attempt after courier.PushTries tries,
// with the last try's error; the queue's retry policy decides what comes next.
func TestTaskPushGivesUpAfterItsTries(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(func(int) (contract.SendPushResult, error) {
		return contract.SendPushResult{}, temporal.NewApplicationError("push: worker answered 503", contract.ErrTypePushUnanswered)
	})

	res := env.run(t, attempt3)

	require.Len(t, env.pushes, courier.PushTries)
	require.Len(t, env.finishes, 1)
	require.Equal(t, courier.OutcomeFailure, res.Outcome.Kind)
	require.Contains(t, res.Outcome.Message, "worker answered 503")
}

// A push that finds the task moved on (cancelled, or finished by an earlier run) ends the
// workflow as stale without touching the row: no Finish, no status written.
func TestTaskStaleAttemptTouchesNothing(t *testing.T) {
	stale := temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", contract.ErrTypeTaskStale, nil)
	t.Run("local push", func(t *testing.T) {
		env := newTaskEnv(t)
		env.onPush(func(int) (contract.SendPushResult, error) { return contract.SendPushResult{}, stale })
		require.Equal(t, workflows.TaskRunResult{Stale: true}, env.run(t, attempt3))
		require.Empty(t, env.finishes)
		require.Empty(t, env.upserts)
		require.Len(t, env.pushes, 1, "not tried again")
	})
	t.Run("push-and-wait", func(t *testing.T) {
		env := newTaskEnv(t)
		env.onPushAwait(func(context.Context) (contract.AttemptResult, error) { return contract.AttemptResult{}, stale })
		require.Equal(t, workflows.TaskRunResult{Stale: true}, env.run(t, attempt3Heartbeat))
		require.Empty(t, env.finishes)
		require.Empty(t, env.upserts)
	})
}

// A worker that reports before its answer to the push reached courier: the result reaches the
// run while it pushes, and is the attempt's at once, whatever the push's own answer.
func TestTaskResultBeforeThePushIsAnswered(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted).After(time.Hour)
	won := contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "quick", Result: json.RawMessage(`{"ok":true}`), Recorded: true}
	var refused error
	env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: won, Status: courier.TaskSuccess}, &refused)

	res := env.run(t, attempt3)

	require.NoError(t, refused)
	require.Empty(t, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
}

// Once the attempt has its outcome, a result update is refused (the gateway answers 409): the
// recorded outcome stands.
func TestTaskResultUpdateIsRefusedWhenTheAttemptIsOver(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted)
	env.finishMock.After(time.Minute) // the deadline's outcome is being recorded when the result comes
	var late error
	env.report(10*time.Minute+30*time.Second, contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}, &late)

	res := env.run(t, attempt3)

	var app *temporal.ApplicationError
	require.ErrorAs(t, late, &app)
	require.Equal(t, workflows.ErrTypeAttemptOver, app.Type())
	require.Len(t, env.finishes, 1)
	require.Equal(t, courier.OutcomeTimeout, res.Outcome.Kind)
}

// Cancelling the workflow while the attempt is outstanding (pushing, waiting for the result,
// or in its push-and-wait) still finishes it as cancelled, on a disconnected context so the
// cancel cannot abort it, rather than at the deadline (10 min) or when the push-and-wait would
// have ended (1 h). When the API has already cancelled the row, Finish changes nothing and no
// status is written; when it had not, the row is cancelled and so is the status.
func TestTaskCancelWhileOutstanding(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     workflows.TaskParams
		setup func(e *taskEnv)
	}{
		// The test environment ends a cancelled local activity when its mock returns: here at 2 min.
		{"pushing", attempt3, func(e *taskEnv) { e.onPush(accepted).After(2 * time.Minute) }},
		{"waiting", attempt3, func(e *taskEnv) { e.onPush(accepted) }},
		{"push-and-wait", attempt3Heartbeat, func(e *taskEnv) {
			e.onPushAwait(completed(contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}})).After(time.Hour)
		}},
	} {
		for name, fin := range map[string]contract.FinishTaskResult{
			"row already cancelled by the API": {Applied: false, Status: courier.TaskCancelled},
			"row still processing":             {Applied: true, Status: courier.TaskCancelled},
		} {
			t.Run(c.name+", "+name, func(t *testing.T) {
				env := newTaskEnv(t)
				c.setup(env)
				env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) { return fin, nil }
				env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)

				res := env.run(t, c.p)

				cancelled := contract.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}
				require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: cancelled}}, env.finishes)
				require.False(t, env.finishAt[0].After(env.start.Add(2*time.Minute)), "finished on the cancel")
				require.Equal(t, workflows.TaskRunResult{Applied: fin.Applied, Status: courier.TaskCancelled, Outcome: cancelled}, res)
				var states []string
				if fin.Applied {
					states = []string{string(courier.TaskCancelled)}
				}
				require.Equal(t, states, env.upsertedStates(t))
			})
		}
	}
}

// A cancel that arrives while Finish is recording an outcome does not stop it: Finish runs on a
// disconnected context, once, with that outcome, so the row never stays in Processing (a
// cancel from the Temporal UI or CLI has no API transaction behind it).
func TestTaskCancelWhileFinishRunsStillFinishes(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted)
	won := contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200}
	env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: won}, new(error))
	env.finishMock.After(time.Minute)
	env.RegisterDelayedCallback(env.CancelWorkflow, 90*time.Second)

	res := env.run(t, attempt3)

	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
}

// The finish is retried until the database answers: an attempt's slot must not stay taken
// because a write failed. Here the database is down for 20 minutes.
func TestTaskFinishIsRetriedUntilItSucceeds(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted)
	env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}, new(error))
	calls := 0
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		calls++
		if env.Now().Before(env.start.Add(20 * time.Minute)) {
			return contract.FinishTaskResult{}, errors.New("database is down")
		}
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3)

	require.Greater(t, calls, 10, "tried again and again while the database was down")
	for _, f := range env.finishes {
		require.Equal(t, contract.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}, f)
	}
	require.False(t, env.finishAt[len(env.finishAt)-1].Before(env.start.Add(20*time.Minute)), "the last try came after the database was back")
	require.True(t, res.Applied)
	require.Equal(t, courier.TaskSuccess, res.Status)
	env.requireFinishedLocally(t)
}

// A Finish the row refused (it had moved on while the attempt ran) is reported as not applied,
// with the row's status, and the workflow's status attribute is left alone.
func TestTaskStatusIsWrittenOnlyWhenFinishApplied(t *testing.T) {
	env := newTaskEnv(t)
	env.onPush(accepted)
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil
	}

	res := env.run(t, attempt3)

	require.False(t, res.Applied)
	require.Equal(t, courier.TaskCancelled, res.Status)
	require.Equal(t, courier.OutcomeTimeout, res.Outcome.Kind)
	require.Empty(t, env.upserts)
}

// How each way the push-and-wait can end without the worker's result becomes the attempt's
// outcome: its last heartbeat tells whether courier was still pushing.
func TestTaskPushAwaitEndingsAreFinishedAsOutcomes(t *testing.T) {
	for name, tc := range map[string]struct {
		err      error
		kind     courier.OutcomeKind
		contains string
	}{
		"the push was refused": {temporal.NewNonRetryableApplicationError("push: 422 Unprocessable Entity", contract.ErrTypePushFailed, nil),
			courier.OutcomeFailure, "push: 422"},
		"processing timeout after the worker accepted": {temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil),
			courier.OutcomeTimeout, "processing timeout: no result within 10m0s"},
		"processing timeout while pushing": {temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil, contract.PushingDetail{CourierPushing: true}),
			courier.OutcomeTimeout, "the push was not accepted within 10m0s"},
		"heartbeat timeout after the worker accepted": {temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil),
			courier.OutcomeTimeout, "heartbeat timeout: no heartbeat for 30s"},
		"heartbeat timeout with the worker's own details": {temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, json.RawMessage(`{"page":3}`)),
			courier.OutcomeTimeout, "heartbeat timeout: no heartbeat for 30s"},
		"heartbeat timeout while pushing": {temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, contract.PushingDetail{CourierPushing: true}),
			courier.OutcomeTimeout, "courier stopped pushing"},
		"any other error": {errors.New("worker lost"), courier.OutcomeFailure, "worker lost"},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPushAwait(func(context.Context) (contract.AttemptResult, error) { return contract.AttemptResult{}, tc.err })

			res := env.run(t, attempt3Heartbeat)

			require.Len(t, env.finishes, 1)
			fin := env.finishes[0]
			require.Equal(t, contract.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: fin.Outcome}, fin)
			require.Equal(t, tc.kind, fin.Outcome.Kind)
			require.Contains(t, fin.Outcome.Message, tc.contains)
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskPending, Outcome: fin.Outcome}, res)
			env.requirePushAwaitedOnce(t, attempt3Heartbeat)
			env.requireFinishedLocally(t)
		})
	}
}

// slowTaskParams time the wall-clock tests: the SDK's test environment checks heartbeat
// timeouts on the wall clock, so they are short, with the activities running three of them.
var slowTaskParams = workflows.TaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Queue: "default",
	ProcessingTimeout: time.Minute, HeartbeatTimeout: 300 * time.Millisecond, PushTimeout: 10 * time.Second}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Heartbeats keep an attempt with a heartbeat timeout alive for as long as the work takes;
// silence ends it on its heartbeat timeout, and whatever comes afterwards is ignored.
func TestTaskHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	p := slowTaskParams
	done := contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "long job done"}}
	t.Run("heartbeats", func(t *testing.T) {
		t.Parallel()
		env := newTaskEnv(t)
		env.onPushAwait(func(ctx context.Context) (contract.AttemptResult, error) {
			for i := 0; i < 30; i++ { // 3 heartbeat timeouts of work, heartbeating
				activity.RecordHeartbeat(ctx)
				if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
					return contract.AttemptResult{}, err
				}
			}
			return done, nil
		})

		res := env.run(t, p)

		require.Equal(t, courier.OutcomeSuccess, res.Outcome.Kind, "message: %s", res.Outcome.Message)
		require.Equal(t, "long job done", res.Outcome.Message)
		require.Equal(t, courier.TaskSuccess, res.Status)
		env.requirePushAwaitedOnce(t, p)
	})
	t.Run("silence", func(t *testing.T) {
		t.Parallel()
		env := newTaskEnv(t)
		env.onPushAwait(func(ctx context.Context) (contract.AttemptResult, error) {
			if err := sleepCtx(ctx, 3*p.HeartbeatTimeout); err != nil {
				return contract.AttemptResult{}, err
			}
			return done, nil
		})

		res := env.run(t, p)

		require.Len(t, env.finishes, 1)
		out := env.finishes[0].Outcome
		require.Equal(t, courier.OutcomeTimeout, out.Kind)
		require.Equal(t, "heartbeat timeout: no heartbeat for "+p.HeartbeatTimeout.String(), out.Message)
		require.Equal(t, out, res.Outcome)
		require.Equal(t, courier.TaskPending, res.Status)
	})
}

// runSweeper runs the sweeper with the sweep answered by sweep; it returns the sweep's
// parameters as received and how each sweep was scheduled.
func runSweeper(t *testing.T, p contract.SweepParams, sweep func(n int) (contract.SweepResult, error)) (*taskEnv, []contract.SweepParams, []activity.Info) {
	env := newTaskEnv(t)
	var got []contract.SweepParams
	var infos []activity.Info
	env.OnActivity(contract.SweepTasksName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.SweepParams) (contract.SweepResult, error) {
			got = append(got, p)
			infos = append(infos, activity.GetInfo(ctx))
			return sweep(len(got))
		})
	env.ExecuteWorkflow(courier.KindTaskSweeper.Workflow, p)
	require.True(t, env.IsWorkflowCompleted())
	return env, got, infos
}

// The sweeper runs one sweep with its bounds, on the finish queue, and returns what the sweep
// changed.
func TestTaskSweeperReturnsTheSweep(t *testing.T) {
	want := contract.SweepResult{Expired: 3, Stopped: 40, Purged: 500, LimiterRepairs: 1}
	params := contract.SweepParams{BatchSize: 100, MaxBatches: 5}
	env, got, infos := runSweeper(t, params, func(int) (contract.SweepResult, error) { return want, nil })

	require.NoError(t, env.GetWorkflowError())
	var res contract.SweepResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, want, res)
	require.Equal(t, []contract.SweepParams{params}, got)
	require.Equal(t, courier.TaskFinishQueue(testQueue), infos[0].TaskQueue)
}

// A failing sweep is retried, up to three attempts in all.
func TestTaskSweeperRetriesAFailingSweep(t *testing.T) {
	t.Run("succeeds on the third attempt", func(t *testing.T) {
		want := contract.SweepResult{Expired: 1}
		env, got, _ := runSweeper(t, contract.SweepParams{}, func(n int) (contract.SweepResult, error) {
			if n < 3 {
				return contract.SweepResult{}, errors.New("database is down")
			}
			return want, nil
		})
		require.NoError(t, env.GetWorkflowError())
		var res contract.SweepResult
		require.NoError(t, env.GetWorkflowResult(&res))
		require.Equal(t, want, res)
		require.Len(t, got, 3)
	})
	t.Run("gives up after three attempts", func(t *testing.T) {
		env, got, _ := runSweeper(t, contract.SweepParams{}, func(int) (contract.SweepResult, error) {
			return contract.SweepResult{}, errors.New("database is down")
		})
		err := env.GetWorkflowError()
		require.Error(t, err)
		require.Contains(t, err.Error(), "database is down")
		require.Len(t, got, 3)
	})
}

// The queue names: beside the default workflows' queue, courier-task-push and
// courier-task-finish; beside any other, derived from it, so deployments that share a
// namespace with their own queues never run each other's pushes.
func TestTaskActivityQueues(t *testing.T) {
	require.Equal(t, "courier-task-push", courier.TaskPushQueue("courier-outbox"))
	require.Equal(t, "courier-task-finish", courier.TaskFinishQueue("courier-outbox"))
	require.Equal(t, "bench-a-task-push", courier.TaskPushQueue("bench-a"))
	require.Equal(t, "bench-a-task-finish", courier.TaskFinishQueue("bench-a"))
}

// A run started with FinalState writes the task's status however the attempt ends, success
// included, so CourierState never says "processing" after the run closed; one that finds its
// task moved on says "stale".
func TestTaskFinalState(t *testing.T) {
	p := attempt3
	p.FinalState = true
	for _, status := range []courier.TaskStatus{courier.TaskSuccess, courier.TaskPending, courier.TaskFailed} {
		t.Run(string(status), func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(accepted)
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: true, Status: status}, nil
			}
			var refused error
			kind := courier.OutcomeSuccess
			if status != courier.TaskSuccess {
				kind = courier.OutcomeFailure
			}
			env.report(time.Minute, contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: kind, Message: "worker said so"}}, &refused)
			env.run(t, p)
			require.NoError(t, refused)
			require.Equal(t, []string{string(status)}, env.upsertedStates(t))
		})
	}
	t.Run("stale", func(t *testing.T) {
		env := newTaskEnv(t)
		env.onPush(func(int) (contract.SendPushResult, error) {
			return contract.SendPushResult{}, temporal.NewNonRetryableApplicationError("moved on", contract.ErrTypeTaskStale, nil)
		})
		res := env.run(t, p)
		require.True(t, res.Stale)
		require.Equal(t, []string{workflows.StateStale}, env.upsertedStates(t))
	})
}

// A run started with QuietSuccess (as the claimer starts them) writes no CourierState when the
// attempt leaves its task Success, recorded by the gateway or by the run (a Completed run
// without a state is a success: one event and one billable action less per task), and writes
// every other ending: the status the row took (pending for a retry, failed, cancelled), and
// stale when the task had moved on, before the push or before the run's finish. FinalState,
// which the claimer still sets for older workers, changes none of it.
func TestTaskQuietSuccess(t *testing.T) {
	for _, final := range []bool{false, true} {
		p := attempt3
		p.QuietSuccess, p.FinalState = true, final
		for _, c := range []struct {
			name     string
			recorded bool // the gateway recorded the result; the run finishes nothing
			fin      contract.FinishTaskResult
			want     []string
		}{
			{"success recorded by the gateway", true, contract.FinishTaskResult{}, nil},
			{"success", false, contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil},
			{"retry", false, contract.FinishTaskResult{Applied: true, Status: courier.TaskPending}, []string{string(courier.TaskPending)}},
			{"failed", false, contract.FinishTaskResult{Applied: true, Status: courier.TaskFailed}, []string{string(courier.TaskFailed)}},
			{"moved on meanwhile (purged)", false, contract.FinishTaskResult{}, []string{workflows.StateStale}},
		} {
			t.Run(fmt.Sprintf("%s, FinalState %v", c.name, final), func(t *testing.T) {
				env := newTaskEnv(t)
				env.onPush(accepted)
				env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) { return c.fin, nil }
				kind, status := courier.OutcomeSuccess, courier.TaskSuccess
				if c.fin.Status != courier.TaskSuccess && !c.recorded {
					kind = courier.OutcomeFailure
				}
				var refused error
				env.report(time.Minute, contract.AttemptResult{Attempt: 3, Status: status,
					Outcome: contract.AttemptOutcome{Kind: kind, Message: "worker said so", Recorded: c.recorded}}, &refused)
				env.run(t, p)
				require.NoError(t, refused)
				require.Equal(t, c.want, env.upsertedStates(t))
				if c.recorded {
					require.Empty(t, env.finishes, "the gateway recorded it")
				}
			})
		}
		t.Run(fmt.Sprintf("stale, FinalState %v", final), func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(func(int) (contract.SendPushResult, error) {
				return contract.SendPushResult{}, temporal.NewNonRetryableApplicationError("moved on", contract.ErrTypeTaskStale, nil)
			})
			require.True(t, env.run(t, p).Stale)
			require.Equal(t, []string{workflows.StateStale}, env.upsertedStates(t))
		})
		t.Run(fmt.Sprintf("cancelled by the API first, FinalState %v", final), func(t *testing.T) {
			// The API cancelled the row and freed the slot, then cancelled the run: the run's
			// finish changes nothing, and the run says the attempt was cancelled.
			env := newTaskEnv(t)
			env.onPush(accepted)
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Status: courier.TaskCancelled}, nil
			}
			env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
			res := env.run(t, p)
			require.Equal(t, courier.OutcomeCancelled, res.Outcome.Kind)
			require.Equal(t, []string{string(courier.TaskCancelled)}, env.upsertedStates(t))
		})
		t.Run(fmt.Sprintf("processing timeout, FinalState %v", final), func(t *testing.T) {
			env := newTaskEnv(t)
			env.onPush(accepted)
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: true, Status: courier.TaskPending}, nil
			}
			env.run(t, p)
			require.Equal(t, []string{string(courier.TaskPending)}, env.upsertedStates(t))
		})
	}
}
