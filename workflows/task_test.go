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
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/workflows"
)

// attempt3 is one attempt as the claimer starts it: the third attempt of version 2.
var attempt3 = workflows.TaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Queue: "default", Priority: 3,
	ProcessingTimeout: 10 * time.Minute}

// pushOf is what the push activity must be called with for p.
func pushOf(p workflows.TaskParams) activities.PushTaskParams {
	return activities.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout}
}

var stateKey = temporal.NewSearchAttributeKeyKeyword(courier.SAState)

type taskEnv struct {
	*testsuite.TestWorkflowEnvironment
	// finish answers each Finish call; by default the row took the outcome (Applied) and
	// moved to the status the outcome leads to with retries left.
	finish func(activities.FinishTaskParams) (activities.FinishTaskResult, error)

	mu       sync.Mutex
	pushes   []activity.Info               // how each push was scheduled
	finishes []activities.FinishTaskParams // what each Finish was started with
	finishAt []time.Time                   // when (virtual time) each Finish started
	upserts  []temporal.SearchAttributes   // the workflow's search-attribute upserts

	finishMock *testsuite.MockCallWrapper // the Finish mock, for a test to delay it
}

// newTaskEnv runs the task workflows with push registered as the push activity (a stand-in
// that must be mocked when nil) and Finish answered by env.finish; it records how the push
// was scheduled, what Finish was started with and the search-attribute upserts.
func newTaskEnv(t *testing.T, push func(context.Context, activities.PushTaskParams) (activities.TaskOutcome, error)) *taskEnv {
	var s testsuite.WorkflowTestSuite
	env := &taskEnv{TestWorkflowEnvironment: s.NewTestWorkflowEnvironment()}
	workflows.Register(env)
	if push == nil {
		push = func(context.Context, activities.PushTaskParams) (activities.TaskOutcome, error) {
			t.Error("the push activity was called without a mock")
			return activities.TaskOutcome{}, errors.New("unmocked push")
		}
	}
	env.RegisterActivityWithOptions(push, activity.RegisterOptions{Name: activities.PushTaskName})
	env.RegisterActivityWithOptions(func(context.Context, activities.FinishTaskParams) (activities.FinishTaskResult, error) {
		return activities.FinishTaskResult{}, nil
	}, activity.RegisterOptions{Name: activities.FinishTaskName})
	env.RegisterActivityWithOptions(func(context.Context, activities.SweepParams) (activities.SweepResult, error) {
		return activities.SweepResult{}, nil
	}, activity.RegisterOptions{Name: activities.SweepTasksName})

	env.finish = func(p activities.FinishTaskParams) (activities.FinishTaskResult, error) {
		st := courier.TaskPending
		switch p.Outcome.Kind {
		case workflows.OutcomeSuccess:
			st = courier.TaskSuccess
		case workflows.OutcomeCancelled:
			st = courier.TaskCancelled
		}
		return activities.FinishTaskResult{Applied: true, Status: st}, nil
	}
	env.finishMock = env.OnActivity(activities.FinishTaskName, mock.Anything, mock.Anything).Return(
		func(_ context.Context, p activities.FinishTaskParams) (activities.FinishTaskResult, error) {
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
		case activities.PushTaskName:
			env.pushes = append(env.pushes, *info)
		case activities.FinishTaskName:
			var p activities.FinishTaskParams
			if err := args.Get(&p); err != nil {
				t.Errorf("decode the finish params: %v", err)
			}
			p.Outcome = noResultIsNil(p.Outcome)
			env.finishes = append(env.finishes, p)
			env.finishAt = append(env.finishAt, env.Now())
		}
	})
	return env
}

// run executes one attempt and returns its result; the workflow must end without an error.
func (e *taskEnv) run(t *testing.T, p workflows.TaskParams) workflows.TaskRunResult {
	t.Helper()
	e.ExecuteWorkflow(workflows.TaskName, p)
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	var res workflows.TaskRunResult
	require.NoError(t, e.GetWorkflowResult(&res))
	res.Outcome = noResultIsNil(res.Outcome)
	return res
}

// noResultIsNil maps the JSON null that an absent result becomes on its way through the data
// converter back to nil, so outcomes compare with the ones the tests build.
func noResultIsNil(o activities.TaskOutcome) activities.TaskOutcome {
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

// requirePushScheduledFor checks the push was started once, addressed by the attempt's
// activity id, with the attempt's timeouts and no retry of its own.
func (e *taskEnv) requirePushScheduledFor(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.Len(t, e.pushes, 1, "one push per attempt; retries go back through the queue")
	info := e.pushes[0]
	require.Equal(t, courier.TaskAttemptActivityID(p.Attempt), info.ActivityID, "the result and heartbeat callbacks address the push by this id")
	require.Equal(t, p.ProcessingTimeout, info.StartToCloseTimeout)
	require.Equal(t, p.HeartbeatTimeout, info.HeartbeatTimeout)
	require.Equal(t, int32(1), info.Attempt)
}

// The worker's success is recorded as it was reported, for the attempt that ran, and the
// workflow ends with the status Finish moved the row to.
func TestTaskSuccessIsFinishedAsReported(t *testing.T) {
	env := newTaskEnv(t, nil)
	won := activities.TaskOutcome{Kind: workflows.OutcomeSuccess, StatusCode: 200, Message: "done", Result: json.RawMessage(`{"rows":42}`)}
	env.OnActivity(activities.PushTaskName, mock.Anything, pushOf(attempt3)).Return(won, nil).Once()
	env.finish = func(activities.FinishTaskParams) (activities.FinishTaskResult, error) {
		return activities.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3)

	require.Equal(t, []activities.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
	env.requirePushScheduledFor(t, attempt3)
	env.AssertExpectations(t)
}

// A failure report, or a report of a kind the workflow does not know, is finished as a failure
// with the worker's details kept; the workflow ends with the status Finish chose: Pending for
// a retry, Failed once the retries are spent.
func TestTaskFailureIsFinishedAndRetriedByFinish(t *testing.T) {
	retryAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, tc := range map[string]struct {
		kind   string
		status courier.TaskStatus
	}{
		"failure with retries left":      {workflows.OutcomeFailure, courier.TaskPending},
		"unknown kind is a failure":      {"exploded", courier.TaskPending},
		"empty kind is a failure":        {"", courier.TaskPending},
		"failure with the retries spent": {workflows.OutcomeFailure, courier.TaskFailed},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil)
			reported := activities.TaskOutcome{Kind: tc.kind, StatusCode: 503, Message: "upstream down", Result: json.RawMessage(`{"retry":true}`)}
			env.OnActivity(activities.PushTaskName, mock.Anything, pushOf(attempt3)).Return(reported, nil).Once()
			env.finish = func(activities.FinishTaskParams) (activities.FinishTaskResult, error) {
				return activities.FinishTaskResult{Applied: true, Status: tc.status, NextAttemptAt: retryAt}, nil
			}

			res := env.run(t, attempt3)

			want := reported
			want.Kind = workflows.OutcomeFailure
			require.Equal(t, []activities.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: want}}, env.finishes)
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: tc.status, Outcome: want}, res)
			require.Equal(t, []string{string(tc.status)}, env.upsertedStates(t))
		})
	}
}

// An attempt that ends without a report is classified by the workflow: Temporal's timeouts
// become timeout outcomes that say which limit ran out, any other push error a failure with
// its message. The push itself is never retried: the queue's policy decides on a retry.
func TestTaskPushErrorsAreFinishedAsOutcomes(t *testing.T) {
	p := attempt3
	p.HeartbeatTimeout = 30 * time.Second
	for name, tc := range map[string]struct {
		err      error
		kind     string
		contains []string
	}{
		"processing timeout": {
			err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil), kind: workflows.OutcomeTimeout,
			contains: []string{"processing timeout", "10m0s"},
		},
		"heartbeat timeout": {
			err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil), kind: workflows.OutcomeTimeout,
			contains: []string{"heartbeat timeout", "30s"},
		},
		"push refused": {
			err:  temporal.NewNonRetryableApplicationError("push: worker answered 503", activities.ErrTypePushFailed, nil),
			kind: workflows.OutcomeFailure, contains: []string{"worker answered 503"},
		},
		"transient push error is not retried": {
			err: errors.New("connection reset by peer"), kind: workflows.OutcomeFailure, contains: []string{"connection reset by peer"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil)
			env.OnActivity(activities.PushTaskName, mock.Anything, pushOf(p)).Return(activities.TaskOutcome{}, tc.err).Once()

			res := env.run(t, p)

			require.Len(t, env.finishes, 1)
			fin := env.finishes[0]
			require.Equal(t, activities.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: fin.Outcome}, fin)
			require.Equal(t, tc.kind, fin.Outcome.Kind)
			for _, s := range tc.contains {
				require.Contains(t, fin.Outcome.Message, s)
			}
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskPending, Outcome: fin.Outcome}, res)
			env.requirePushScheduledFor(t, p)
			env.AssertExpectations(t)
		})
	}
}

// Finish is retried until the database answers: an attempt's slot must not stay taken because
// one write failed.
func TestTaskFinishIsRetriedUntilItSucceeds(t *testing.T) {
	env := newTaskEnv(t, nil)
	env.OnActivity(activities.PushTaskName, mock.Anything, mock.Anything).
		Return(activities.TaskOutcome{Kind: workflows.OutcomeSuccess}, nil).Once()
	calls := 0
	env.finish = func(activities.FinishTaskParams) (activities.FinishTaskResult, error) {
		calls++
		if calls < 4 {
			return activities.FinishTaskResult{}, errors.New("database is down")
		}
		return activities.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3)

	require.Equal(t, 4, calls)
	require.Len(t, env.finishes, 4, "each retry records the same attempt")
	for _, f := range env.finishes {
		require.Equal(t, activities.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: activities.TaskOutcome{Kind: workflows.OutcomeSuccess}}, f)
	}
	require.True(t, res.Applied)
	require.Equal(t, courier.TaskSuccess, res.Status)
}

// slowTaskParams time the two wall-clock tests: the SDK's test environment checks heartbeat
// timeouts on the wall clock, so they are short, with the push running three of them.
var slowTaskParams = workflows.TaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Queue: "default",
	ProcessingTimeout: time.Minute, HeartbeatTimeout: 300 * time.Millisecond}

// A push that outlives its heartbeat timeout is kept alive by heartbeats and its result is
// finished as success.
func TestTaskHeartbeatKeepsALongAttemptAlive(t *testing.T) {
	t.Parallel()
	p := slowTaskParams
	var info activity.Info
	env := newTaskEnv(t, func(ctx context.Context, _ activities.PushTaskParams) (activities.TaskOutcome, error) {
		info = activity.GetInfo(ctx)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		done := time.NewTimer(3 * p.HeartbeatTimeout)
		defer done.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
				return activities.TaskOutcome{}, ctx.Err()
			case <-done.C:
				return activities.TaskOutcome{Kind: workflows.OutcomeSuccess, Message: "long job done"}, nil
			case <-tick.C:
			}
		}
	})

	res := env.run(t, p)

	require.Equal(t, workflows.OutcomeSuccess, res.Outcome.Kind, "message: %s", res.Outcome.Message)
	require.Equal(t, "long job done", res.Outcome.Message)
	require.Equal(t, courier.TaskSuccess, res.Status)
	require.Len(t, env.finishes, 1)
	require.Equal(t, workflows.OutcomeSuccess, env.finishes[0].Outcome.Kind)
	require.Equal(t, courier.TaskAttemptActivityID(p.Attempt), info.ActivityID)
	require.Equal(t, p.ProcessingTimeout, info.StartToCloseTimeout)
	require.Equal(t, p.HeartbeatTimeout, info.HeartbeatTimeout)
	require.Equal(t, int32(1), info.Attempt)
	env.requirePushScheduledFor(t, p)
}

// The same long push without heartbeats times out on its heartbeat timeout, and whatever it
// returns afterwards is ignored.
func TestTaskWithoutHeartbeatTimesOut(t *testing.T) {
	t.Parallel()
	p := slowTaskParams
	env := newTaskEnv(t, func(ctx context.Context, _ activities.PushTaskParams) (activities.TaskOutcome, error) {
		done := time.NewTimer(3 * p.HeartbeatTimeout)
		defer done.Stop()
		select {
		case <-ctx.Done():
			return activities.TaskOutcome{}, ctx.Err()
		case <-done.C:
			return activities.TaskOutcome{Kind: workflows.OutcomeSuccess, Message: "too late"}, nil
		}
	})

	res := env.run(t, p)

	require.Len(t, env.finishes, 1)
	out := env.finishes[0].Outcome
	require.Equal(t, workflows.OutcomeTimeout, out.Kind)
	require.Contains(t, out.Message, "heartbeat timeout")
	require.Contains(t, out.Message, p.HeartbeatTimeout.String())
	require.Equal(t, out, res.Outcome)
	require.Equal(t, courier.TaskPending, res.Status)
	env.requirePushScheduledFor(t, p)
}

// Cancelling the workflow while the push waits for the worker still finishes the attempt as
// cancelled (on a disconnected context, so the cancel cannot abort it), at once rather than
// when the push would have ended. When the API has already cancelled the row, Finish changes
// nothing and no status is written; when it had not, the row is cancelled and so is the status.
func TestTaskCancelWhilePushOutstanding(t *testing.T) {
	for name, tc := range map[string]struct {
		fin    activities.FinishTaskResult
		states []string
	}{
		"row already cancelled by the API": {activities.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil},
		"row still processing":             {activities.FinishTaskResult{Applied: true, Status: courier.TaskCancelled}, []string{string(courier.TaskCancelled)}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil)
			start := env.Now()
			env.OnActivity(activities.PushTaskName, mock.Anything, mock.Anything).
				Return(activities.TaskOutcome{Kind: workflows.OutcomeSuccess}, nil).After(time.Hour).Once()
			env.finish = func(activities.FinishTaskParams) (activities.FinishTaskResult, error) { return tc.fin, nil }
			env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)

			res := env.run(t, attempt3)

			cancelled := activities.TaskOutcome{Kind: workflows.OutcomeCancelled, Message: "cancelled"}
			require.Equal(t, []activities.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: cancelled}}, env.finishes)
			require.True(t, env.finishAt[0].Before(start.Add(time.Hour)), "finished on the cancel, not when the push would have ended")
			require.Equal(t, workflows.TaskRunResult{Applied: tc.fin.Applied, Status: courier.TaskCancelled, Outcome: cancelled}, res)
			require.Equal(t, tc.states, env.upsertedStates(t))
		})
	}
}

// A cancel that comes after the attempt finished finds the workflow closed: the recorded
// outcome stands and nothing is finished again.
func TestTaskCancelAfterFinishChangesNothing(t *testing.T) {
	env := newTaskEnv(t, nil)
	won := activities.TaskOutcome{Kind: workflows.OutcomeSuccess, StatusCode: 200}
	env.OnActivity(activities.PushTaskName, mock.Anything, mock.Anything).Return(won, nil).After(time.Minute).Once()
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Minute)

	res := env.run(t, attempt3)

	require.Equal(t, []activities.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
}

// A cancel that arrives while Finish is recording the worker's result does not stop it: Finish
// runs on a disconnected context, once, with the worker's outcome, so the row never stays in
// Processing (a cancel from the Temporal UI or CLI has no API transaction behind it).
func TestTaskCancelWhileFinishRunsStillFinishes(t *testing.T) {
	env := newTaskEnv(t, nil)
	won := activities.TaskOutcome{Kind: workflows.OutcomeSuccess, StatusCode: 200}
	env.OnActivity(activities.PushTaskName, mock.Anything, mock.Anything).Return(won, nil).Once()
	env.finishMock.After(time.Minute)
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)

	res := env.run(t, attempt3)

	require.Equal(t, []activities.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Equal(t, []string{string(courier.TaskSuccess)}, env.upsertedStates(t))
}

// A push that finds the task moved on (cancelled, or finished by an earlier run) ends the
// workflow as stale without touching the row: no Finish, no status written.
func TestTaskStaleAttemptTouchesNothing(t *testing.T) {
	env := newTaskEnv(t, nil)
	env.OnActivity(activities.PushTaskName, mock.Anything, pushOf(attempt3)).Return(activities.TaskOutcome{},
		temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", activities.ErrTypeTaskStale, nil)).Once()

	res := env.run(t, attempt3)

	require.Equal(t, workflows.TaskRunResult{Stale: true}, res)
	require.Empty(t, env.finishes)
	require.Empty(t, env.upserts)
	env.requirePushScheduledFor(t, attempt3)
}

// A Finish the row refused (it had moved on while the attempt ran) is reported as not
// applied, with the row's status, and the workflow's status attribute is left alone; an
// applied one writes the new status.
func TestTaskStatusIsWrittenOnlyWhenFinishApplied(t *testing.T) {
	for name, tc := range map[string]struct {
		fin    activities.FinishTaskResult
		states []string
	}{
		"refused": {activities.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, nil},
		"applied": {activities.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, []string{string(courier.TaskSuccess)}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil)
			won := activities.TaskOutcome{Kind: workflows.OutcomeSuccess}
			env.OnActivity(activities.PushTaskName, mock.Anything, mock.Anything).Return(won, nil).Once()
			env.finish = func(activities.FinishTaskParams) (activities.FinishTaskResult, error) { return tc.fin, nil }

			res := env.run(t, attempt3)

			require.Len(t, env.finishes, 1)
			require.Equal(t, workflows.TaskRunResult{Applied: tc.fin.Applied, Status: tc.fin.Status, Outcome: won}, res)
			require.Equal(t, tc.states, env.upsertedStates(t))
		})
	}
}

// runSweeper runs the sweeper with the sweep answered by sweep; it returns the sweep's
// parameters as received.
func runSweeper(t *testing.T, p activities.SweepParams, sweep func(n int) (activities.SweepResult, error)) (*taskEnv, []activities.SweepParams) {
	env := newTaskEnv(t, nil)
	var got []activities.SweepParams
	env.OnActivity(activities.SweepTasksName, mock.Anything, mock.Anything).Return(
		func(_ context.Context, p activities.SweepParams) (activities.SweepResult, error) {
			got = append(got, p)
			return sweep(len(got))
		})
	env.ExecuteWorkflow(workflows.TaskSweeperName, p)
	require.True(t, env.IsWorkflowCompleted())
	return env, got
}

// The sweeper runs one sweep with its bounds and returns what the sweep changed.
func TestTaskSweeperReturnsTheSweep(t *testing.T) {
	want := activities.SweepResult{Expired: 3, Stopped: 40, Purged: 500, LimiterRepairs: 1}
	params := activities.SweepParams{BatchSize: 100, MaxBatches: 5}
	env, got := runSweeper(t, params, func(int) (activities.SweepResult, error) { return want, nil })

	require.NoError(t, env.GetWorkflowError())
	var res activities.SweepResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, want, res)
	require.Equal(t, []activities.SweepParams{params}, got)
}

// A failing sweep is retried, up to three attempts in all.
func TestTaskSweeperRetriesAFailingSweep(t *testing.T) {
	t.Run("succeeds on the third attempt", func(t *testing.T) {
		want := activities.SweepResult{Expired: 1}
		env, got := runSweeper(t, activities.SweepParams{}, func(n int) (activities.SweepResult, error) {
			if n < 3 {
				return activities.SweepResult{}, errors.New("database is down")
			}
			return want, nil
		})
		require.NoError(t, env.GetWorkflowError())
		var res activities.SweepResult
		require.NoError(t, env.GetWorkflowResult(&res))
		require.Equal(t, want, res)
		require.Len(t, got, 3)
	})
	t.Run("gives up after three attempts", func(t *testing.T) {
		env, got := runSweeper(t, activities.SweepParams{}, func(int) (activities.SweepResult, error) {
			return activities.SweepResult{}, errors.New("database is down")
		})
		err := env.GetWorkflowError()
		require.Error(t, err)
		require.Contains(t, err.Error(), "database is down")
		require.Len(t, got, 3)
	})
}
