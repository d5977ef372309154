package workflows_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// attempt3V2 is attempt3 as the claimer starts it for a queue with a heartbeat timeout (code
// version 2 to 4; one
// activity pushes and waits).
var attempt3V2 = func() workflows.TaskParams {
	p := attempt3
	p.HeartbeatTimeout = 30 * time.Second
	p.V = workflows.TaskRecordedV
	return p
}()

// requirePushAwaitedOnce checks the attempt's one activity: on the push queue, addressed by the
// attempt's activity id (the gateway completes it with the result), bounded by the processing
// timeout in all, with the heartbeat timeout, told the attempt's deadline and timeouts; and
// that neither the split push nor the separate wait ran.
func (e *taskEnv) requirePushAwaitedOnce(t *testing.T, p workflows.TaskParams) {
	t.Helper()
	require.Len(t, e.pushAwaits, 1, "one activity per attempt; retries go back through the queue")
	require.Empty(t, e.pushes, "no separate push")
	require.Empty(t, e.waits, "no separate wait")
	info, params := e.pushAwaits[0], e.pushAwaitParams[0]
	if p.V >= workflows.TaskOnPushQueueV {
		// The claimer starts these runs on the push queue (workflows.TaskRunQueue): the push
		// stays on the run's own queue, so it is dispatched eagerly.
		require.Equal(t, testQueue, info.TaskQueue, "the push-and-wait is on the run's own queue")
	} else {
		require.Equal(t, contract.TaskPushQueue(testQueue), info.TaskQueue, "pushes run on their own task queue")
	}
	require.Equal(t, courier.TaskAttemptActivityID(p.Attempt), info.ActivityID, "the result and heartbeat callbacks address it by this id")
	require.Equal(t, p.ProcessingTimeout, info.ScheduleToCloseTimeout, "the attempt never runs past the processing deadline")
	require.Equal(t, p.ProcessingTimeout, info.StartToCloseTimeout)
	require.Equal(t, p.HeartbeatTimeout, info.HeartbeatTimeout)
	require.Equal(t, int32(1), info.Attempt)
	require.Equal(t, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
		ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout, PushTimeout: p.PushTimeout,
		Deadline: params.Deadline}, params)
	require.WithinDuration(t, e.start.Add(p.ProcessingTimeout), params.Deadline, time.Second, "the worker is told the deadline Temporal enforces")
}

// requireFinishedLocally checks every finish ran as a local activity.
func (e *taskEnv) requireFinishedLocally(t *testing.T) {
	t.Helper()
	require.NotEmpty(t, e.finishInfo)
	for _, info := range e.finishInfo {
		require.True(t, info.IsLocalActivity, "the outcome is recorded in a local activity: one marker, no extra workflow task")
	}
}

// The worker's result completes the attempt's one activity; the outcome is recorded as
// reported, locally, and the workflow ends with the status the row moved to.
func TestPushAwaitSuccessIsFinishedAsReported(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Result: json.RawMessage(`{"rows":42}`)}
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(won, nil).Once()
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3V2)

	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: won}}, env.finishes)
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: won}, res)
	require.Empty(t, env.upserts, "a success writes no state: the run's completion says it")
	env.requirePushAwaitedOnce(t, attempt3V2)
	env.requireFinishedLocally(t)
	env.AssertExpectations(t)
}

// From code version 4, a success the gateway recorded before it handed it over ends the run at
// once: no finish, no state upsert, the run's result says the row holds it. Code version 3
// runs the finish for the same result (it finds the success recorded), and so does version 4
// for a success the gateway could not record.
func TestPushAwaitRecordedSuccessEndsTheRun(t *testing.T) {
	recorded := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Recorded: true}
	for _, c := range []struct {
		name     string
		v        int
		out      courier.AttemptOutcome
		finishes bool
	}{
		{"v4 recorded", workflows.TaskRecordedV, recorded, false},
		{"v4 not recorded", workflows.TaskRecordedV, courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200}, true},
		{"v3 recorded", workflows.TaskOnPushQueueV, recorded, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			p := attempt3V2
			p.V = c.v
			env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(c.out, nil).Once()
			env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
				return contract.FinishTaskResult{Applied: !c.out.Recorded, Status: courier.TaskSuccess}, nil
			}

			res := env.run(t, p)

			if c.finishes {
				require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: c.out}}, env.finishes)
				env.requireFinishedLocally(t)
			} else {
				require.Empty(t, env.finishes, "the gateway recorded it: nothing left to record")
				require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: recorded}, res)
			}
			require.Empty(t, env.upserts, "a success writes no state")
			env.requirePushAwaitedOnce(t, p)
		})
	}
}

// Runs of code version 2, started on the workflows' queue, keep scheduling their push on the
// push queue beside it.
func TestPushAwaitV2SchedulesOnThePushQueue(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	p := attempt3V2
	p.V = workflows.TaskPushAwaitV
	won := courier.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200}
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(won, nil).Once()
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}
	env.run(t, p)
	env.requirePushAwaitedOnce(t, p)
	require.Equal(t, contract.TaskPushQueue(testQueue), env.pushAwaits[0].TaskQueue)
}

func TestTaskRunQueue(t *testing.T) {
	require.Equal(t, "courier-outbox", workflows.TaskRunQueue("courier-outbox", workflows.TaskPushAwaitV))
	require.Equal(t, "courier-task-push", workflows.TaskRunQueue("courier-outbox", workflows.TaskOnPushQueueV))
	require.Equal(t, "orders-task-push", workflows.TaskRunQueue("orders", workflows.TaskOnPushQueueV))
}

// How each way the activity can end becomes the attempt's outcome.
func TestPushAwaitEndingsAreFinishedAsOutcomes(t *testing.T) {
	for name, tc := range map[string]struct {
		out      courier.AttemptOutcome
		err      error
		kind     courier.OutcomeKind
		contains []string
	}{
		"the worker reports a failure": {out: courier.AttemptOutcome{Kind: "odd", Message: "bad input"},
			kind: courier.OutcomeFailure, contains: []string{"bad input"}},
		"the push was refused": {err: temporal.NewNonRetryableApplicationError("push: 422 Unprocessable Entity", contract.ErrTypePushFailed, nil),
			kind: courier.OutcomeFailure, contains: []string{"push: 422"}},
		"processing timeout after the worker accepted": {err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil),
			kind: courier.OutcomeTimeout, contains: []string{"processing timeout: no result within", "10m0s"}},
		"processing timeout while pushing": {err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE, nil, contract.PushingDetail{CourierPushing: true}),
			kind: courier.OutcomeTimeout, contains: []string{"the push was not accepted within 10m0s"}},
		"heartbeat timeout after the worker accepted": {err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil),
			kind: courier.OutcomeTimeout, contains: []string{"heartbeat timeout: no heartbeat for 30s"}},
		"heartbeat timeout with the worker's own details": {err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, json.RawMessage(`{"page":3}`)),
			kind: courier.OutcomeTimeout, contains: []string{"heartbeat timeout: no heartbeat for 30s"}},
		"heartbeat timeout while pushing": {err: temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, contract.PushingDetail{CourierPushing: true}),
			kind: courier.OutcomeTimeout, contains: []string{"courier stopped pushing"}},
		"any other error": {err: errors.New("worker lost"), kind: courier.OutcomeFailure, contains: []string{"worker lost"}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newTaskEnv(t, nil, nil)
			env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(tc.out, tc.err).Once()

			res := env.run(t, attempt3V2)

			require.Len(t, env.finishes, 1)
			fin := env.finishes[0]
			require.Equal(t, contract.FinishTaskParams{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: fin.Outcome}, fin)
			require.Equal(t, tc.kind, fin.Outcome.Kind)
			for _, s := range tc.contains {
				require.Contains(t, fin.Outcome.Message, s)
			}
			require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskPending, Outcome: fin.Outcome}, res)
			env.requirePushAwaitedOnce(t, attempt3V2)
			env.requireFinishedLocally(t)
		})
	}
}

// An attempt the task has moved past touches nothing.
func TestPushAwaitStaleAttemptTouchesNothing(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{}, temporal.NewNonRetryableApplicationError("moved on", contract.ErrTypeTaskStale, nil)).Once()

	res := env.run(t, attempt3V2)

	require.Equal(t, workflows.TaskRunResult{Stale: true}, res)
	require.Empty(t, env.finishes)
	require.Empty(t, env.upserts)
}

// A cancel while the attempt is outstanding records it as cancelled at once.
func TestPushAwaitCancelWhileOutstanding(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess}, nil).After(time.Hour).Once()
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskCancelled}, nil
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)

	res := env.run(t, attempt3V2)

	cancelled := courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}
	require.Equal(t, []contract.FinishTaskParams{{TaskID: "t-1", Version: 2, Attempt: 3, Outcome: cancelled}}, env.finishes)
	require.True(t, env.finishAt[0].Before(env.start.Add(time.Hour)), "finished on the cancel, not when the activity would have ended")
	require.Equal(t, workflows.TaskRunResult{Applied: true, Status: courier.TaskCancelled, Outcome: cancelled}, res)
	require.Equal(t, []string{string(courier.TaskCancelled)}, env.upsertedStates(t))
}

// The local finish is retried until the database answers, as the finish activity is: here it
// is down for 20 minutes.
func TestPushAwaitFinishIsRetriedUntilItSucceeds(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).Return(courier.AttemptOutcome{Kind: courier.OutcomeSuccess}, nil).Once()
	calls := 0
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		calls++
		if env.Now().Before(env.start.Add(20 * time.Minute)) {
			return contract.FinishTaskResult{}, errors.New("database is down")
		}
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, nil
	}

	res := env.run(t, attempt3V2)

	require.Greater(t, calls, 10, "tried again and again while the database was down")
	require.False(t, env.finishAt[len(env.finishAt)-1].Before(env.start.Add(20*time.Minute)), "the last try came after the database was back")
	require.True(t, res.Applied)
	require.Equal(t, courier.TaskSuccess, res.Status)
	env.requireFinishedLocally(t)
}

// An attempt that leaves its task Failed fails its run with the attempt's message (env.run
// checks the failure), and one that the row refused writes no status.
func TestPushAwaitFailedTaskFailsTheRun(t *testing.T) {
	env := newTaskEnv(t, nil, nil)
	env.OnActivity(contract.PushAwaitName, mock.Anything, mock.Anything).
		Return(courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "corrupt file"}, nil).Once()
	env.finish = func(contract.FinishTaskParams) (contract.FinishTaskResult, error) {
		return contract.FinishTaskResult{Applied: true, Status: courier.TaskFailed}, nil
	}

	res := env.run(t, attempt3V2)

	require.Equal(t, courier.TaskFailed, res.Status)
	require.Equal(t, "corrupt file", res.Outcome.Message)
	require.Equal(t, []string{string(courier.TaskFailed)}, env.upsertedStates(t))
}
