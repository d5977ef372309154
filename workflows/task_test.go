package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// attempt3 is one attempt as the claimer starts it: the third attempt of version 2.
var attempt3 = workflows.TaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Queue: "default", Priority: 3,
	ProcessingTimeout: 10 * time.Minute, PushTimeout: 20 * time.Second}

// testQueue is the test environment's task queue: the task workflows' own queue in these tests.
const testQueue = "default-test-taskqueue"

var stateKey = temporal.NewSearchAttributeKeyKeyword(courier.SAState)

type taskEnv struct {
	*testsuite.TestWorkflowEnvironment
	start time.Time // virtual time when the workflow was set up
	// finish answers each Finish call; by default the row took the outcome (Applied) and
	// moved to the status the outcome leads to with retries left.
	finish func(contract.FinishTaskParams) (contract.FinishTaskResult, error)

	mu              sync.Mutex
	pushes          []activity.Info             // how each push try was scheduled
	pushParams      []contract.PushTaskParams   // what each push try was started with
	pushAt          []time.Time                 // when (virtual time) each push try started
	pushAwaits      []activity.Info             // how each push-and-wait (taskPushAwaitV) was scheduled
	pushAwaitParams []contract.PushTaskParams   // what each push-and-wait was started with
	waits           []activity.Info             // how each wait for the result was scheduled
	finishes        []contract.FinishTaskParams // what each Finish was started with
	finishInfo      []activity.Info             // how each Finish was scheduled
	finishAt        []time.Time                 // when (virtual time) each Finish started
	upserts         []temporal.SearchAttributes // the workflow's search-attribute upserts

	finishMock *testsuite.MockCallWrapper // the Finish mock, for a test to delay it
}

// newTaskEnv runs the task workflows with push and wait registered as the push and the wait
// activities (stand-ins that must be mocked when nil) and Finish answered by env.finish; it
// records how each activity was scheduled, what they were started with and the
// search-attribute upserts.
func newTaskEnv(t *testing.T,
	push func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error),
	wait func(context.Context, contract.AwaitResultParams) (courier.AttemptOutcome, error),
) *taskEnv {
	var s testsuite.WorkflowTestSuite
	env := &taskEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	env.start = env.Now()
	workflows.Register(env)
	if push == nil {
		push = func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) {
			t.Error("the push activity was called without a mock")
			return contract.SendPushResult{}, errors.New("unmocked push")
		}
	}
	if wait == nil {
		wait = func(context.Context, contract.AwaitResultParams) (courier.AttemptOutcome, error) {
			t.Error("the wait activity was called without a mock")
			return courier.AttemptOutcome{}, errors.New("unmocked wait")
		}
	}
	env.RegisterActivityWithOptions(push, activity.RegisterOptions{Name: contract.SendPushName})
	env.RegisterActivityWithOptions(func(context.Context, contract.PushTaskParams) (courier.AttemptOutcome, error) {
		t.Error("the push-and-wait activity was called without a mock")
		return courier.AttemptOutcome{}, errors.New("unmocked push-and-wait")
	}, activity.RegisterOptions{Name: contract.PushAwaitName})
	env.RegisterActivityWithOptions(wait, activity.RegisterOptions{Name: contract.AwaitResultName})
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
	// Finishes are recorded here rather than by the started listener: they run as activities or
	// (taskPushAwaitV) as local activities, and the mock sees both.
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
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		env.mu.Lock()
		defer env.mu.Unlock()
		switch info.ActivityType.Name {
		case contract.SendPushName:
			var p contract.PushTaskParams
			if err := args.Get(&p); err != nil {
				t.Errorf("decode the push params: %v", err)
			}
			env.pushes = append(env.pushes, *info)
			env.pushParams = append(env.pushParams, p)
			env.pushAt = append(env.pushAt, env.Now())
		case contract.AwaitResultName:
			env.waits = append(env.waits, *info)
		case contract.PushAwaitName:
			var p contract.PushTaskParams
			if err := args.Get(&p); err != nil {
				t.Errorf("decode the push-and-wait params: %v", err)
			}
			env.pushAwaits = append(env.pushAwaits, *info)
			env.pushAwaitParams = append(env.pushAwaitParams, p)
		}
	})
	return env
}

// run executes one attempt and returns its result; the workflow must end without an error,
// unless the attempt left its task Failed: then the run fails with the attempt's message and
// the result in the details.
func (e *taskEnv) run(t *testing.T, p workflows.TaskParams) workflows.TaskRunResult {
	t.Helper()
	e.ExecuteWorkflow(workflows.TaskName, p)
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

// report sends the worker's report as the gateway does when no wait is open, at the given
// virtual time, and records whether it was rejected.
func (e *taskEnv) report(at time.Duration, r workflows.TaskResultParams, rejected *error) {
	e.RegisterDelayedCallback(func() {
		e.UpdateWorkflow(workflows.TaskResultUpdate, "", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *rejected = err },
			OnAccept:   func() {},
			OnComplete: func(_ any, err error) { *rejected = err },
		}, r)
	}, at)
}

// noResultIsNil maps the JSON null that an absent result becomes on its way through the data
// converter back to nil, so outcomes compare with the ones the tests build.
func noResultIsNil(o courier.AttemptOutcome) courier.AttemptOutcome {
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

// requirePushedOnce checks the push was tried once, on the push queue, bounded by the push
// timeout per try and by the processing timeout in all, and told the worker the attempt's
// deadline and timeouts.
func (e *taskEnv) requirePushedOnce(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.Len(t, e.pushes, 1, "one push try")
	info, params := e.pushes[0], e.pushParams[0]
	require.Equal(t, contract.TaskPushQueue(testQueue), info.TaskQueue, "pushes run on their own task queue")
	require.Equal(t, p.ProcessingTimeout, info.ScheduleToCloseTimeout, "tries never run past the processing deadline")
	require.Equal(t, p.PushTimeout+10*time.Second, info.StartToCloseTimeout, "one try: the push timeout (the HTTP client's) and a margin")
	require.Zero(t, info.HeartbeatTimeout, "the heartbeat timeout does not run while the push does")
	require.Equal(t, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout, PushTimeout: p.PushTimeout,
		Deadline: params.Deadline}, params)
	require.True(t, e.pushAt[0].Add(p.ProcessingTimeout).Equal(params.Deadline), "the deadline is the processing timeout from the push")
}

// requireWaitedOnce checks the wait for the result was scheduled once, after the push,
// addressed by the attempt's activity id, on the finish queue, with the heartbeat timeout and
// the time left to the deadline, and no retry of its own.
func (e *taskEnv) requireWaitedOnce(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.Len(t, e.waits, 1, "one wait per attempt; retries go back through the queue")
	info := e.waits[0]
	require.Equal(t, courier.TaskAttemptActivityID(p.Attempt), info.ActivityID, "the result and heartbeat callbacks address the wait by this id")
	require.Equal(t, contract.TaskFinishQueue(testQueue), info.TaskQueue)
	require.Equal(t, p.HeartbeatTimeout, info.HeartbeatTimeout)
	left := e.pushParams[len(e.pushParams)-1].Deadline.Sub(info.ScheduledTime)
	require.InDelta(t, float64(left), float64(info.ScheduleToCloseTimeout), float64(time.Second), "the wait ends at the attempt's deadline")
	require.Equal(t, int32(1), info.Attempt)
}

// requireFinishedOnTheFinishQueue checks every Finish ran on the finish queue.
func (e *taskEnv) requireFinishedOnTheFinishQueue(t *testing.T) {
	t.Helper()
	require.NotEmpty(t, e.finishInfo)
	for _, info := range e.finishInfo {
		require.Equal(t, contract.TaskFinishQueue(testQueue), info.TaskQueue, "finishes (slot releases) never wait behind pushes")
	}
}

func accepted() (contract.SendPushResult, error) { return contract.SendPushResult{Try: 1}, nil }

// The worker's success is recorded as it was reported, for the attempt that ran, and the
// workflow ends with the status Finish moved the row to.
func TestTaskSuccessIsFinishedAsReported(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Result: json.RawMessage(`{"rows":42}`)}
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything,
		contract.AwaitResultParams{TaskID: "t-1", Version: 2, Attempt: 3}).Return(won, nil).Once()
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3)

	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
	env.requirePushedOnce(t, attempt3)
	env.requireWaitedOnce(t, attempt3)
	env.requireFinishedOnTheFinishQueue(t)
	env.AssertExpectations(t)
}

// A run started without a push timeout (by a claimer older than the setting) pushes with the
// default one.
func TestTaskWithoutPushTimeoutUsesTheDefault(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess}, nil).Once()
	p := attempt3
	p.PushTimeout = 0

	env.run(t, p)

	require.Len(t, env.pushParams, 1)
	require.Equal(t, courier.DefaultPushTimeout, env.pushParams[0].PushTimeout)
	require.Equal(t, courier.DefaultPushTimeout+10*time.Second, env.pushes[0].StartToCloseTimeout)
}

// A failure report, or a report of a kind the workflow does not know, is finished as a failure
// with the worker's details kept; the workflow ends with the status Finish chose: Pending for
// a retry, Failed once the retries are spent.
func TestTaskFailureIsFinishedAndRetriedByFinish(t *testing.T) {
	retryAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, tc := range map[string]struct {
		kind   courier.OutcomeKind
		status courier.TaskStatus
	}{
		"failure with retries left":      {courier.OutcomeFailure, courier.TaskPending},
		"unknown kind is a failure":      {"exploded", courier.TaskPending},
		"empty kind is a failure":        {"", courier.TaskPending},
		"failure with the retries spent": {courier.OutcomeFailure, courier.TaskFailed},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			reported := courier.AttemptOutcome{Kind: tc.kind, StatusCode: 503, Message: "upstream down", Result: json.RawMessage(`{"retry":true}`)}
			env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
			env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(reported, nil).Once()
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: true, Status: tc.status, NextAttemptAt: retryAt}, nil
			}

			res := env.run(t, attempt3)

			want := reported
			want.Kind = courier.OutcomeFailure
			require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: want}}, env.finishes)
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: tc.status, Outcome: want}, res)
			require.Equal(t, []string{string(tc.status)}, env.upsertedStates(t))
		})
	}
}

// A wait that ends without a report is classified by the workflow: Temporal's timeouts become
// timeout outcomes that say which limit ran out, any other error a failure with its message.
// The wait itself is never retried: the queue's policy decides on a retry.
func TestTaskWaitErrorsAreFinishedAsOutcomes(t *testing.T) {
	p := attempt3
	p.HeartbeatTimeout = 30 * time.Second
	for name, tc := range map[string]struct {
		err      error
		kind     courier.OutcomeKind
		contains []string
	}{
		"processing timeout": {
			err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil), kind: courier.OutcomeTimeout,
			contains: []string{"processing timeout", "10m0s"},
		},
		"heartbeat timeout": {
			err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil), kind: courier.OutcomeTimeout,
			contains: []string{"heartbeat timeout", "30s"},
		},
		"any other error": {
			err: errors.New("worker lost"), kind: courier.OutcomeFailure, contains: []string{"worker lost"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
			env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(courier.AttemptOutcome{}, tc.err).Once()

			res := env.run(t, p)

			require.Len(t, env.finishes, 1)
			fin := env.finishes[0]
			require.Equal(t, contract.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: fin.Outcome}, fin)
			require.Equal(t, tc.kind, fin.Outcome.Kind)
			for _, s := range tc.contains {
				require.Contains(t, fin.Outcome.Message, s)
			}
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskPending, Outcome: fin.Outcome}, res)
			env.requireWaitedOnce(t, p)
			env.AssertExpectations(t)
		})
	}
}

// A push the worker refused (a 4xx answer, a blocked address, no push_url) fails the attempt
// at once: one try, no wait.
func TestTaskRefusedPushFailsTheAttemptWithoutAWait(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(contract.SendPushResult{},
		temporal.NewNonRetryableApplicationError("push: worker answered 422 (not retried)", contract.ErrTypePushFailed, nil)).Once()

	res := env.run(t, attempt3)

	require.Len(t, env.finishes, 1)
	require.Equal(t, courier.OutcomeFailure, env.finishes[0].Outcome.Kind)
	require.Contains(t, env.finishes[0].Outcome.Message, "worker answered 422")
	require.Equal(t, courier.TaskPending, res.Status)
	env.requirePushedOnce(t, attempt3)
	require.Empty(t, env.waits)
}

// A push try that failed on the way (no connection, no answer, 429 or 5xx) is tried again
// within the attempt, after the worker's Retry-After when it sent one; once a try is accepted,
// the attempt waits for its result as usual.
func TestTaskUnansweredPushIsTriedAgainWithinTheAttempt(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	tries := 0
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) {
			tries++
			switch tries {
			case 1:
				return contract.SendPushResult{}, temporal.NewApplicationError("push: callback: connection refused", contract.ErrTypePushUnanswered)
			case 2:
				return contract.SendPushResult{}, temporal.NewApplicationErrorWithOptions("push: worker answered 429",
					contract.ErrTypePushUnanswered, temporal.ApplicationErrorOptions{NextRetryDelay: 45 * time.Second})
			}
			return contract.SendPushResult{Try: 3}, nil
		})
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "third time lucky"}
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(won, nil).Once()

	res := env.run(t, attempt3)

	require.Equal(t, 3, tries)
	require.Equal(t, won, res.Outcome)
	require.GreaterOrEqual(t, env.pushAt[2].Sub(env.pushAt[1]), 45*time.Second, "the worker's Retry-After is honoured")
	for _, p := range env.pushParams {
		require.Equal(t, env.pushParams[0].Deadline, p.Deadline, "every try tells the worker the same deadline")
	}
	require.Len(t, env.waits, 1)
}

// A push whose tries keep failing on the way fails the attempt after courier.PushTries tries,
// with the last try's error; the queue's retry policy decides what comes next.
func TestTaskPushGivesUpAfterItsTries(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	tries := 0
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) {
			tries++
			return contract.SendPushResult{}, temporal.NewApplicationError("push: worker answered 503", contract.ErrTypePushUnanswered)
		})

	res := env.run(t, attempt3)

	require.Equal(t, courier.PushTries, tries)
	require.Empty(t, env.waits)
	require.Len(t, env.finishes, 1)
	require.Equal(t, courier.OutcomeFailure, res.Outcome.Kind)
	require.Contains(t, res.Outcome.Message, "worker answered 503")
}

// A push that finds the task moved on (cancelled, or finished by an earlier run) ends the
// workflow as stale without touching the row: no wait, no Finish, no status written.
func TestTaskStaleAttemptTouchesNothing(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(contract.SendPushResult{},
		temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", contract.ErrTypeTaskStale, nil)).Once()

	res := env.run(t, attempt3)

	require.Equal(t, workflows.TaskRunResult{Stale: true}, res)
	require.Empty(t, env.waits)
	require.Empty(t, env.finishes)
	require.Empty(t, env.upserts)
	env.requirePushedOnce(t, attempt3)
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

// A worker that takes longer than the heartbeat timeout to accept its push, and then
// heartbeats, is not timed out: the heartbeat timeout starts with the wait, once the worker has
// the task.
func TestTaskSlowAcceptIsNotAHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	p := slowTaskParams
	env := newTaskEnv(t,
		func(ctx context.Context, _ contract.PushTaskParams) (contract.SendPushResult, error) {
			if err := sleepCtx(ctx, 3*p.HeartbeatTimeout); err != nil { // no heartbeats while the worker accepts
				return contract.SendPushResult{}, err
			}
			return contract.SendPushResult{Try: 1}, nil
		},
		func(ctx context.Context, _ contract.AwaitResultParams) (courier.AttemptOutcome, error) {
			for i := 0; i < 30; i++ { // 3 heartbeat timeouts of work, heartbeating
				activity.RecordHeartbeat(ctx)
				if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
					return courier.AttemptOutcome{}, err
				}
			}
			return courier.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "long job done"}, nil
		})

	res := env.run(t, p)

	require.Equal(t, courier.OutcomeSuccess, res.Outcome.Kind, "message: %s", res.Outcome.Message)
	require.Equal(t, "long job done", res.Outcome.Message)
	require.Equal(t, courier.TaskSuccess, res.Status)
	env.requirePushedOnce(t, p)
	env.requireWaitedOnce(t, p)
}

// A wait without heartbeats times out on its heartbeat timeout, and whatever it returns
// afterwards is ignored.
func TestTaskWaitWithoutHeartbeatTimesOut(t *testing.T) {
	t.Parallel()
	p := slowTaskParams
	env := newTaskEnv(t,
		func(context.Context, contract.PushTaskParams) (contract.SendPushResult, error) { return accepted() },
		func(ctx context.Context, _ contract.AwaitResultParams) (courier.AttemptOutcome, error) {
			if err := sleepCtx(ctx, 3*p.HeartbeatTimeout); err != nil {
				return courier.AttemptOutcome{}, err
			}
			return courier.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "too late"}, nil
		})

	res := env.run(t, p)

	require.Len(t, env.finishes, 1)
	out := env.finishes[0].Outcome
	require.Equal(t, courier.OutcomeTimeout, out.Kind)
	require.Contains(t, out.Message, "heartbeat timeout")
	require.Contains(t, out.Message, p.HeartbeatTimeout.String())
	require.Equal(t, out, res.Outcome)
	require.Equal(t, courier.TaskPending, res.Status)
	env.requireWaitedOnce(t, p)
}

// A worker that reports before its answer to the push reached courier: the gateway hands the
// result over as an update, the attempt is finished with it at once, and no wait is opened.
func TestTaskResultBeforeThePushIsAnswered(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).After(time.Hour).Once()
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "quick", Result: json.RawMessage(`{"ok":true}`)}
	var rejected error
	env.report(time.Minute, workflows.TaskResultParams{Attempt: 3, Outcome: won}, &rejected)

	res := env.run(t, attempt3)

	require.NoError(t, rejected)
	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.True(t, env.finishAt[0].Before(env.start.Add(time.Hour)), "finished on the report, not when the push ended")
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Empty(t, env.waits)
}

// A result that comes as an update while the wait is scheduled (the gateway found no wait a
// moment before) ends the wait and is finished as reported.
func TestTaskResultUpdateWhileWaiting(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "never"}, nil).After(time.Hour).Once()
	failed := courier.AttemptOutcome{Kind: "weird", StatusCode: 500, Message: "parser crashed"}
	var rejected error
	env.report(time.Minute, workflows.TaskResultParams{Attempt: 3, Outcome: failed}, &rejected)

	res := env.run(t, attempt3)

	require.NoError(t, rejected)
	want := failed
	want.Kind = courier.OutcomeFailure
	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: want}}, env.finishes)
	require.True(t, env.finishAt[0].Before(env.start.Add(time.Hour)))
	require.Equal(t, want, res.Outcome)
}

// Once the attempt has its outcome, a result update is refused (the gateway answers 409), and so
// is one naming another attempt: the recorded outcome stands.
func TestTaskResultUpdateIsRefusedWhenTheAttemptIsOver(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).After(time.Minute).Once()
	timedOut := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(courier.AttemptOutcome{}, timedOut).After(time.Minute).Once()
	env.finishMock.After(time.Minute)
	var otherAttempt, late error
	env.report(30*time.Second, workflows.TaskResultParams{Attempt: 2, Outcome: courier.AttemptOutcome{Kind: courier.OutcomeSuccess}}, &otherAttempt)
	env.report(150*time.Second, workflows.TaskResultParams{Attempt: 3, Outcome: courier.AttemptOutcome{Kind: courier.OutcomeSuccess}}, &late)

	res := env.run(t, attempt3)

	for _, err := range []error{otherAttempt, late} {
		var app *temporal.ApplicationError
		require.ErrorAs(t, err, &app)
		require.Equal(t, workflows.ErrTypeAttemptOver, app.Type())
	}
	require.Len(t, env.finishes, 1)
	require.Equal(t, courier.OutcomeTimeout, res.Outcome.Kind)
}

// Cancelling the workflow while the push or the wait is outstanding still finishes the attempt
// as cancelled (on a disconnected context, so the cancel cannot abort it), at once rather than
// when the activity would have ended. When the API has already cancelled the row, Finish
// changes nothing and no status is written; when it had not, the row is cancelled and so is
// the status.
func TestTaskCancelWhileOutstanding(t *testing.T) {
	for name, tc := range map[string]struct {
		slowPush bool
		fin      contract.FinishTaskResult
		states   []string
	}{
		"push, row already cancelled by the API": {true, contract.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil},
		"push, row still processing":             {true, contract.FinishTaskResult{Applied: true, Status: courier.TaskCancelled}, []string{string(courier.TaskCancelled)}},
		"wait, row already cancelled by the API": {false, contract.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil},
		"wait, row still processing":             {false, contract.FinishTaskResult{Applied: true, Status: courier.TaskCancelled}, []string{string(courier.TaskCancelled)}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			if tc.slowPush {
				env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).After(time.Hour).Once()
			} else {
				env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
				env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).
					Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess}, nil).After(time.Hour).Once()
			}
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) { return tc.fin, nil }
			env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)

			res := env.run(t, attempt3)

			cancelled := courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}
			require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: cancelled}}, env.finishes)
			require.True(t, env.finishAt[0].Before(env.start.Add(time.Hour)), "finished on the cancel, not when the activity would have ended")
			require.Equal(t, workflows.TaskRunResult{Applied: tc.fin.Applied, Status: courier.TaskCancelled, Outcome: cancelled}, res)
			require.Equal(t, tc.states, env.upsertedStates(t))
			if tc.slowPush {
				require.Empty(t, env.waits, "no wait after a cancelled push")
			}
		})
	}
}

// A cancel that comes after the attempt finished finds the workflow closed: the recorded
// outcome stands and nothing is finished again.
func TestTaskCancelAfterFinishChangesNothing(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200}
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(won, nil).After(time.Minute).Once()
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Minute)

	res := env.run(t, attempt3)

	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
}

// A cancel that arrives while Finish is recording the worker's result does not stop it: Finish
// runs on a disconnected context, once, with the worker's outcome, so the row never stays in
// Processing (a cancel from the Temporal UI or CLI has no API transaction behind it).
func TestTaskCancelWhileFinishRunsStillFinishes(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200}
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(won, nil).Once()
	env.finishMock.After(time.Minute)
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)

	res := env.run(t, attempt3)

	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
}

// Finish is retried until the database answers: an attempt's slot must not stay taken because
// one write failed.
func TestTaskFinishIsRetriedUntilItSucceeds(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
	env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess}, nil).Once()
	calls := 0
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		calls++
		if calls < 4 {
			return contract.FinishTaskResult{}, errors.New("database is down")
		}
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3)

	require.Equal(t, 4, calls)
	require.Len(t, env.finishes, 4, "each retry records the same attempt")
	for _, f := range env.finishes {
		require.Equal(t, contract.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: courier.AttemptOutcome{Kind: courier.OutcomeSuccess}}, f)
	}
	require.True(t, res.Applied)
	require.Equal(t, courier.TaskSuccess, res.Status)
	env.requireFinishedOnTheFinishQueue(t)
}

// A Finish the row refused (it had moved on while the attempt ran) is reported as not
// applied, with the row's status, and the workflow's status attribute is left alone; an
// applied one writes the new status.
func TestTaskStatusIsWrittenOnlyWhenFinishApplied(t *testing.T) {
	for name, tc := range map[string]struct {
		fin    contract.FinishTaskResult
		states []string
	}{
		"refused": {contract.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil},
		"applied": {contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, []string{string(courier.TaskSuccess)}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess}
			env.OnActivity(contract.SendPushName, mock.Anything, mock.Anything).Return(accepted()).Once()
			env.OnActivity(contract.AwaitResultName, mock.Anything, mock.Anything).Return(won, nil).Once()
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) { return tc.fin, nil }

			res := env.run(t, attempt3)

			require.Len(t, env.finishes, 1)
			require.Equal(t, workflows.TaskRunResult{Applied: tc.fin.Applied, Status: tc.fin.Status, Outcome: won}, res)
			require.Equal(t, tc.states, env.upsertedStates(t))
		})
	}
}

// runSweeper runs the sweeper with the sweep answered by sweep; it returns the sweep's
// parameters as received and how each sweep was scheduled.
func runSweeper(t *testing.T, p contract.SweepParams, sweep func(n int) (contract.SweepResult, error)) (*taskEnv, []contract.SweepParams, []activity.Info) {
	env := newTaskEnv(t, nil, nil)
	var got []contract.SweepParams
	var infos []activity.Info
	env.OnActivity(contract.SweepTasksName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.SweepParams) (contract.SweepResult, error) {
			got = append(got, p)
			infos = append(infos, activity.GetInfo(ctx))
			return sweep(len(got))
		})
	env.ExecuteWorkflow(workflows.TaskSweeperName, p)
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
	require.Equal(t, contract.TaskFinishQueue(testQueue), infos[0].TaskQueue)
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
	require.Equal(t, "courier-task-push", contract.TaskPushQueue("courier-outbox"))
	require.Equal(t, "courier-task-finish", contract.TaskFinishQueue("courier-outbox"))
	require.Equal(t, "bench-a-task-push", contract.TaskPushQueue("bench-a"))
	require.Equal(t, "bench-a-task-finish", contract.TaskFinishQueue("bench-a"))
}
