package tasks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/workflows"
)

// attemptStore holds one task processing its first attempt, pushed into run "run-1"; its
// finish applies the outcome unless down.
type attemptStore struct {
	Store
	task     courier.Task
	down     bool
	finished []contract.AttemptOutcome
}

func (s *attemptStore) GetTask(context.Context, string, int64) (courier.Task, error) {
	return s.task, nil
}

func (s *attemptStore) ReleaseSlotHolds(context.Context, ...string) (int, error) {
	return 0, nil
}

func (s *attemptStore) FinishReported(_ context.Context, _ string, _ int64, _ int, o contract.AttemptOutcome, _ string) (store.FinishResult, error) {
	if s.down {
		return store.FinishResult{}, errors.New("database is down")
	}
	s.finished = append(s.finished, o)
	return store.FinishResult{Applied: true, Recorded: true, Status: courier.TaskSuccess, Queue: s.task.Queue}, nil
}

func processing(heartbeat time.Duration) courier.Task {
	return courier.Task{TaskID: "t-1", Version: 1, Queue: "default", Status: courier.TaskProcessing, Attempt: 1,
		RunID: "run-1", AttemptHeartbeatTimeout: heartbeat}
}

var success = api.TaskResult{Attempt: 1, Status: courier.OutcomeSuccess, StatusCode: 200, Message: "done"}

// A result is recorded in the row, then handed to the attempt's run marked recorded: an
// attempt with a heartbeat timeout (recorded by its push) by completing its push-and-wait
// activity by id, one without by the task-result update. A result the row could not take is
// handed over unrecorded, for the run to record.
func TestReportHandsTheResultToTheRun(t *testing.T) {
	recorded := contract.AttemptResult{Attempt: 1, Status: courier.TaskSuccess,
		Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done", Recorded: true}}
	unrecorded := contract.AttemptResult{Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Message: "done"}}
	for _, c := range []struct {
		name      string
		heartbeat time.Duration
		down      bool
		want      contract.AttemptResult
	}{
		{"heartbeat timeout, recorded", time.Second, false, recorded},
		{"heartbeat timeout, not recorded", time.Second, true, unrecorded},
		{"no heartbeat timeout, recorded", 0, false, recorded},
		{"no heartbeat timeout, not recorded", 0, true, unrecorded},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := &attemptStore{task: processing(c.heartbeat), down: c.down}
			tc := mocks.NewClient(t)
			handed := make(chan contract.AttemptResult, 1)
			if c.heartbeat > 0 {
				tc.On("CompleteActivityByID", mock.Anything, "ns", "task/t-1/1", "run-1", "attempt-1", mock.Anything, nil).
					Run(func(args mock.Arguments) { handed <- args.Get(5).(contract.AttemptResult) }).Return(nil).Once()
			} else {
				h := mocks.NewWorkflowUpdateHandle(t)
				h.On("Get", mock.Anything, nil).Return(nil).Maybe() // after the result was handed
				tc.On("UpdateWorkflow", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
					o := args.Get(1).(client.UpdateWorkflowOptions)
					require.Equal(t, "task/t-1/1", o.WorkflowID)
					require.Equal(t, "run-1", o.RunID)
					require.Equal(t, "result-1", o.UpdateID, "one update per attempt: a repeat is answered by the first")
					require.Equal(t, workflows.TaskResultUpdate, o.UpdateName)
					handed <- o.Args[0].(contract.AttemptResult)
				}).Return(h, nil).Once()
			}
			s := NewService(st, tc, "ns", nil, nil, nil)

			release, err := s.Report(t.Context(), "t-1", 1, success)
			require.NoError(t, err)
			release()

			select {
			case got := <-handed:
				require.Equal(t, c.want, got)
			case <-time.After(10 * time.Second):
				t.Fatal("the result never reached the run")
			}
			if !c.down {
				require.Len(t, st.finished, 1, "recorded in the row")
			}
		})
	}
}

// A run that refuses an unrecorded result (the attempt has its outcome) or is gone makes the
// report a conflict.
func TestReportUnrecordedToAnEndedAttemptIsAConflict(t *testing.T) {
	st := &attemptStore{task: processing(time.Second), down: true}
	tc := mocks.NewClient(t)
	tc.On("CompleteActivityByID", mock.Anything, "ns", "task/t-1/1", "run-1", "attempt-1", mock.Anything, nil).
		Return(serviceerror.NewNotFound("activity not found")).Once()
	s := NewService(st, tc, "ns", nil, nil, nil)

	_, err := s.Report(t.Context(), "t-1", 1, success)

	require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "%v", err)
}

// Heartbeats extend an attempt's heartbeat timeout on its push-and-wait activity; an attempt
// without one has nothing to extend, and its heartbeats are accepted without a call to Temporal.
func TestHeartbeatReachesOnlyAttemptsWithAHeartbeatTimeout(t *testing.T) {
	t.Run("heartbeat timeout", func(t *testing.T) {
		tc := mocks.NewClient(t)
		tc.On("RecordActivityHeartbeatByID", mock.Anything, "ns", "task/t-1/1", "run-1", "attempt-1", mock.Anything).Return(nil).Once()
		s := NewService(&attemptStore{task: processing(time.Second)}, tc, "ns", nil, nil, nil)
		require.NoError(t, s.Heartbeat(t.Context(), "t-1", 1, 1, []byte(`{"page":3}`)))
	})
	t.Run("no heartbeat timeout", func(t *testing.T) {
		s := NewService(&attemptStore{task: processing(0)}, mocks.NewClient(t), "ns", nil, nil, nil)
		require.NoError(t, s.Heartbeat(t.Context(), "t-1", 1, 1, nil))
	})
	t.Run("attempt over", func(t *testing.T) {
		tc := mocks.NewClient(t)
		tc.On("RecordActivityHeartbeatByID", mock.Anything, "ns", "task/t-1/1", "run-1", "attempt-1").
			Return(serviceerror.NewNotFound("activity not found")).Once()
		s := NewService(&attemptStore{task: processing(time.Second)}, tc, "ns", nil, nil, nil)
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(s.Heartbeat(t.Context(), "t-1", 1, 1, nil)))
	})
}
