package store_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// RetryTask is a re-submission of the version with its own content: a failed or cancelled
// highest version becomes pending, due now, with a fresh retry budget and the attempt numbers
// still counting; anything else is a conflict and changes nothing.
func TestTaskRetry(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		req := taskReq("doc", 1, 2, `{"file":"a.pdf"}`)
		req.Overrides.MaxAttempts = 2
		_, _, err := s.InsertTask(ctx, req)
		require.NoError(t, err)
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET status = 'failed', attempt = 2, attempt_base = 0, message = 'boom', result = '{\"why\":1}' WHERE task_id = 'doc'").Exec(ctx)
		require.NoError(t, err)

		got, err := s.RetryTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, got.Status)
		require.Equal(t, 0, got.Attempts, "a fresh retry budget")
		require.Equal(t, 2, got.Attempt, "the attempt numbers keep counting, so no late result matches")
		require.JSONEq(t, `{"file":"a.pdf"}`, string(got.Payload), "its own content")
		require.Equal(t, 2, got.Priority)
		require.Equal(t, 2, got.Overrides.MaxAttempts)
		require.Empty(t, got.Message)
		require.Nil(t, got.Result)
		require.NotNil(t, got.ExpiresAt)

		for _, status := range []courier.TaskStatus{courier.TaskPending, courier.TaskProcessing, courier.TaskSuccess, courier.TaskStopped, courier.TaskSuperseded} {
			setStatus(t, s, "doc", 1, status)
			_, err = s.RetryTask(ctx, "doc", 1)
			require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "%s cannot be retried", status)
			cur, err := s.GetTask(ctx, "doc", 1)
			require.NoError(t, err)
			require.Equal(t, status, cur.Status, "unchanged")
		}
		setStatus(t, s, "doc", 1, courier.TaskCancelled)
		got, err = s.RetryTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, got.Status, "a cancelled task can be retried")

		// A lower version is stale: only the highest comes back.
		_, _, err = s.InsertTask(ctx, taskReq("doc", 2, 3, `{"file":"b.pdf"}`))
		require.NoError(t, err)
		setStatus(t, s, "doc", 1, courier.TaskFailed)
		_, err = s.RetryTask(ctx, "doc", 1)
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err))
		var e *courier.Error
		require.ErrorAs(t, err, &e)
		require.EqualValues(t, 2, e.Details["current_version"])

		_, err = s.RetryTask(ctx, "nope", 1)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
	})
}

// A bulk action's filter: any of several statuses, and only each task id's highest version.
func TestTaskListStatusesAndLatest(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		for _, r := range []courier.TaskRequest{taskReq("a", 1, 3, `1`), taskReq("a", 2, 3, `2`), taskReq("b", 1, 3, `3`), taskReq("c", 1, 3, `4`)} {
			_, _, err := s.InsertTask(ctx, r)
			require.NoError(t, err)
		}
		setStatus(t, s, "a", 1, courier.TaskFailed)
		setStatus(t, s, "a", 2, courier.TaskCancelled)
		setStatus(t, s, "b", 1, courier.TaskFailed)

		keys := func(f courier.TaskFilter) []string {
			tasks, _, err := s.ListTasks(ctx, f)
			require.NoError(t, err)
			var out []string
			for _, tk := range tasks {
				b, _ := json.Marshal([]any{tk.TaskID, tk.Version})
				out = append(out, string(b))
			}
			return out
		}
		require.ElementsMatch(t, []string{`["a",1]`, `["a",2]`, `["b",1]`}, keys(courier.TaskFilter{Statuses: courier.TaskRetryable}))
		require.ElementsMatch(t, []string{`["a",2]`, `["b",1]`}, keys(courier.TaskFilter{Statuses: courier.TaskRetryable, Latest: true}))
		require.ElementsMatch(t, []string{`["b",1]`}, keys(courier.TaskFilter{Statuses: courier.TaskRetryable, Status: courier.TaskFailed, Latest: true}))
		require.ElementsMatch(t, []string{`["c",1]`}, keys(courier.TaskFilter{Statuses: courier.TaskCancellable}))
	})
}
