package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// POST /v1/tasks/bulk/cancel and /v1/tasks/bulk/retry: the filter reaches the service as
// given, the cap defaults to 1,000, the answer names the action, and bad filters are refused
// before anything is done. Admin scope only.
func TestBulkTaskActionsAPI(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)

	f.svc.answer(answer{bulk: courier.TaskBulkResult{Affected: 3, Skipped: 1, More: true}})
	var cancelled api.TaskCancelResult
	st, eb := f.call(t, "POST", "/v1/tasks/bulk/cancel", f.admin,
		`{"queue":"parse","status":"pending","priority":2,"created_after":"2026-01-01T00:00:00Z","created_before":"2026-02-01T00:00:00Z","max":50}`, &cancelled)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, api.NewTaskCancelResult(3, 1, true), cancelled)
	require.Equal(t, api.BulkResult{Matched: 4, Done: 3, Skipped: 1, More: true}, cancelled.BulkResult)
	require.Equal(t, "CancelMatching", f.svc.lastCall().method)
	got := f.svc.bulks[len(f.svc.bulks)-1]
	require.Equal(t, 50, got.max)
	require.Equal(t, courier.TaskFilter{Queue: "parse", Status: courier.TaskPending, Priority: 2,
		CreatedAfter: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), CreatedBefore: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)}, got.filter)

	var retried api.TaskRetryResult
	st, eb = f.call(t, "POST", "/v1/tasks/bulk/retry", f.admin, `{}`, &retried)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, api.NewTaskRetryResult(3, 1, true), retried)
	require.Equal(t, api.BulkResult{Matched: 4, Done: 3, Skipped: 1, More: true}, retried.BulkResult)
	require.Equal(t, "RetryMatching", f.svc.lastCall().method)
	got = f.svc.bulks[len(f.svc.bulks)-1]
	require.Equal(t, 1000, got.max, "the default cap")
	require.Equal(t, courier.TaskFilter{}, got.filter)

	calls := f.svc.callCount()
	for _, tc := range []struct{ body, field string }{
		{`{"max":0}`, "max"},
		{`{"max":10001}`, "max"},
		{`{"priority":6}`, "priority"},
		{`{"priority":-1}`, "priority"},
		{`{"status":"lost"}`, "status"},
		{`{"created_after":"2026-02-01T00:00:00Z","created_before":"2026-01-01T00:00:00Z"}`, "created_after"},
	} {
		for _, path := range []string{"/v1/tasks/bulk/cancel", "/v1/tasks/bulk/retry"} {
			st, eb := f.call(t, "POST", path, f.admin, tc.body, nil)
			require.Equal(t, http.StatusUnprocessableEntity, st, "%s %s", path, tc.body)
			require.Equal(t, tc.field, eb.Error.Details["field"], "%s %s: %+v", path, tc.body, eb)
		}
	}
	for _, body := range []string{`{"created_after":"yesterday"}`, `{"queue":"a/b"}`, `{"limit":5}`} {
		st, _ = f.call(t, "POST", "/v1/tasks/bulk/cancel", f.admin, body, nil)
		require.Equal(t, http.StatusBadRequest, st, body)
	}
	require.Equal(t, calls, f.svc.callCount(), "a refused filter reaches nothing")

	for _, tok := range []string{f.producer, f.worker} {
		st, _ = f.call(t, "POST", "/v1/tasks/bulk/cancel", tok, `{}`, nil)
		require.Equal(t, http.StatusForbidden, st)
		st, _ = f.call(t, "POST", "/v1/tasks/bulk/retry", tok, `{}`, nil)
		require.Equal(t, http.StatusForbidden, st)
	}

	// A task may be called "bulk": reading it still reaches the task.
	f.svc.answer(answer{task: pending("bulk", 1, `{}`)})
	var task api.Task
	st, eb = f.call(t, "GET", "/v1/tasks/bulk", f.producer, "", &task)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, fakeCall{"Latest", "bulk", 0}, f.svc.lastCall())
	st, eb = f.call(t, "GET", "/v1/tasks/bulk/versions/1", f.producer, "", &task)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, fakeCall{"Get", "bulk", 1}, f.svc.lastCall())
}

// POST /v1/tasks/{id}/versions/{v}/retry retries one version (scope producer, like a
// re-submission) and answers it; the service's conflict is a 409.
func TestRetryTaskAPI(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	f.svc.answer(answer{task: pending("doc-1", 2, `{}`)})
	var got api.Task
	st, eb := f.call(t, "POST", "/v1/tasks/doc-1/versions/2/retry", f.producer, "", &got)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, fakeCall{"Retry", "doc-1", 2}, f.svc.lastCall())
	require.Equal(t, courier.TaskPending, got.Status)

	f.svc.answer(answer{err: &courier.Error{Code: courier.CodeConflict, Message: "stale", Details: map[string]any{"current_version": 3}}})
	st, eb = f.call(t, "POST", "/v1/tasks/doc-1/versions/2/retry", f.producer, "", nil)
	require.Equal(t, http.StatusConflict, st)
	require.EqualValues(t, 3, eb.Error.Details["current_version"])
	st, _ = f.call(t, "POST", "/v1/tasks/doc-1/versions/2/retry", f.worker, "", nil)
	require.Equal(t, http.StatusForbidden, st)
	st, _ = f.call(t, "POST", "/v1/tasks/doc-1/versions/0/retry", f.producer, "", nil)
	require.Equal(t, http.StatusBadRequest, st)
}
