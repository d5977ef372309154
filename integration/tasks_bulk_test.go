package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/testenv"
)

// bulkCancel and bulkRetry call the bulk actions with an admin key and expect 200.
func (ts *taskStack) bulkCancel(filter map[string]any) api.TaskCancelResult {
	ts.t.Helper()
	var out api.TaskCancelResult
	require.Equal(ts.t, http.StatusOK, ts.call(http.MethodPost, "/v1/tasks/bulk/cancel", ts.admin, filter, &out))
	return out
}

func (ts *taskStack) bulkRetry(filter map[string]any) api.TaskRetryResult {
	ts.t.Helper()
	var out api.TaskRetryResult
	require.Equal(ts.t, http.StatusOK, ts.call(http.MethodPost, "/v1/tasks/bulk/retry", ts.admin, filter, &out))
	return out
}

// TestBulkCancelFreesSlots: a queue with limit 2 holds two tasks in Processing (its worker never
// answers) and four Pending. One bulk cancel by queue cancels all six: the slots are free at
// once, the two attempts' runs end and their results are refused, a task of another queue is
// left alone, and nothing cancelled is pushed afterwards: the next task inserted is the next
// push.
func TestBulkCancelFreesSlots(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				held := make(chan api.TaskPush, 100)
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) { held <- p })
				ts.putQueue("bulk", map[string]any{"concurrency_limit": 2, "push_url": w.url})
				ts.putQueue("elsewhere", map[string]any{}) // no push_url: its task stays pending
				for i := range 6 {
					require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("b-%d", i), 1, 3, "bulk"))
				}
				require.Equal(t, http.StatusCreated, ts.insert("kept", 1, 3, "elsewhere"))
				first := []api.TaskPush{<-held, <-held}
				for _, p := range first {
					ts.waitStatus(p.TaskID, p.TaskVersion, courier.TaskProcessing, 10*time.Second)
				}
				require.Equal(t, 2, ts.inFlight("bulk"))

				res := ts.bulkCancel(map[string]any{"queue": "bulk"})
				require.Equal(t, api.NewTaskCancelResult(6, 0, false), res)
				require.Equal(t, 0, ts.inFlight("bulk"), "the processing tasks' slots are free")
				for i := range 6 {
					require.Equal(t, courier.TaskCancelled, ts.get(fmt.Sprintf("b-%d", i), 1).Status)
				}
				require.Equal(t, courier.TaskPending, ts.get("kept", 1).Status, "another queue's task is not matched")
				for _, p := range first {
					require.Equal(t, http.StatusConflict, report(t, ts.worker, p, "success", 200, "late"), "a cancelled attempt's result is refused")
					if mode == courier.DispatchBatched {
						continue // no run of its own: the row is where a batched attempt ends
					}
					require.Eventually(t, func() bool {
						desc, err := ts.tc.DescribeWorkflowExecution(t.Context(), courier.TaskWorkflowID(p.TaskID, p.TaskVersion), "")
						require.NoError(t, err)
						return desc.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
					}, 10*time.Second, 50*time.Millisecond, "the attempt's run of %s ends", p.TaskID)
				}
				require.Equal(t, api.NewTaskCancelResult(0, 0, false), ts.bulkCancel(map[string]any{"queue": "bulk"}), "a repeat finds nothing")

				require.Equal(t, http.StatusCreated, ts.insert("after", 1, 3, "bulk"))
				next := <-held
				require.Equal(t, "after", next.TaskID, "the next push is the task inserted after the cancel: no cancelled task was pushed")
				order := w.pushOrder()
				require.Len(t, order, 3, "two pushes before the cancel, one after")
			})
		})
	}
}

// TestBulkRetryRunsFailedTasksAgain: four tasks fail for good (one attempt each); once the
// worker is fixed, bulk retries by queue and status make them run again, each with a fresh
// retry budget, to success. The cap takes three and says more match; the next call takes the
// last one and says none remain.
func TestBulkRetryRunsFailedTasksAgain(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				var failing atomic.Bool
				failing.Store(true)
				token := ts.worker
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					w.letGo(p)
					status := "success"
					if failing.Load() {
						status = "failure"
					}
					if code := report(t, token, p, status, 200, status); code != http.StatusAccepted {
						t.Errorf("result for %s: %d", p.TaskID, code)
					}
				})
				ts.putQueue("flaky", map[string]any{"concurrency_limit": 4, "push_url": w.url, "retry": map[string]any{"max_attempts": 1}})
				ids := []string{"f-0", "f-1", "f-2", "f-3"}
				for _, id := range ids {
					require.Equal(t, http.StatusCreated, ts.insert(id, 1, 3, "flaky"))
				}
				for _, id := range ids {
					got := ts.waitStatus(id, 1, courier.TaskFailed, 20*time.Second)
					require.Equal(t, 1, got.Attempts)
				}
				failing.Store(false)

				require.Equal(t, api.NewTaskRetryResult(3, 0, true), ts.bulkRetry(map[string]any{"queue": "flaky", "status": "failed", "max": 3}))
				require.Equal(t, api.NewTaskRetryResult(1, 0, false), ts.bulkRetry(map[string]any{"queue": "flaky", "status": "failed", "max": 3}))
				for _, id := range ids {
					got := ts.waitStatus(id, 1, courier.TaskSuccess, 20*time.Second)
					require.Equal(t, 2, got.Attempt, "the second attempt")
					require.Equal(t, 1, got.Attempts, "counted in a fresh budget")
				}
				require.Equal(t, api.NewTaskRetryResult(0, 0, false), ts.bulkRetry(map[string]any{"queue": "flaky"}), "nothing failed remains")
				require.EqualValues(t, 8, w.pushes.Load(), "each task pushed once per life")
				require.Equal(t, 0, ts.inFlight("flaky"))
			})
		})
	}
}

// TestBulkFilters: in a queue without a worker (its tasks stay pending), a bulk cancel by
// priority and created_before takes exactly the older high-priority tasks, a capped one the
// newest matching tasks first, and a bulk retry by created_before brings back exactly the
// older ones.
func TestBulkFilters(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			ts.putQueue("held", map[string]any{})
			insertGroup := func(group string) []api.Task {
				var out []api.Task
				for i := range 3 {
					for _, prio := range []int{1, 5} {
						id := fmt.Sprintf("%s-p%d-%d", group, prio, i)
						require.Equal(t, http.StatusCreated, ts.insert(id, 1, prio, "held"))
						out = append(out, ts.get(id, 1))
					}
				}
				return out
			}
			older := insertGroup("old")
			last := older[len(older)-1].CreatedAt
			require.Eventually(t, func() bool { return time.Now().After(last) }, 5*time.Second, time.Millisecond,
				"the clock moves past the older group")
			newer := insertGroup("new")
			cut := newer[0].CreatedAt
			require.True(t, cut.After(last), "the groups are apart in time")

			statuses := func() map[string]courier.TaskStatus {
				out := map[string]courier.TaskStatus{}
				for _, tk := range slices.Concat(older, newer) {
					out[tk.TaskID] = ts.get(tk.TaskID, 1).Status
				}
				return out
			}
			want := func(cancelled ...string) map[string]courier.TaskStatus {
				out := map[string]courier.TaskStatus{}
				for _, tk := range slices.Concat(older, newer) {
					out[tk.TaskID] = courier.TaskPending
					if slices.Contains(cancelled, tk.TaskID) {
						out[tk.TaskID] = courier.TaskCancelled
					}
				}
				return out
			}

			res := ts.bulkCancel(map[string]any{"queue": "held", "priority": 1, "created_before": cut.Format(time.RFC3339Nano)})
			require.Equal(t, api.NewTaskCancelResult(3, 0, false), res)
			require.Equal(t, want("old-p1-0", "old-p1-1", "old-p1-2"), statuses(), "priority 1 created before the cut")

			res = ts.bulkCancel(map[string]any{"queue": "held", "priority": 5, "max": 2})
			require.Equal(t, api.NewTaskCancelResult(2, 0, true), res)
			require.Equal(t, want("old-p1-0", "old-p1-1", "old-p1-2", "new-p5-2", "new-p5-1"), statuses(), "the newest two of priority 5")

			rr := ts.bulkRetry(map[string]any{"queue": "held", "created_before": cut.Format(time.RFC3339Nano)})
			require.Equal(t, api.NewTaskRetryResult(3, 0, false), rr, "failed and cancelled tasks are retried by default")
			require.Equal(t, want("new-p5-2", "new-p5-1"), statuses(), "only the older group's cancelled tasks came back")

			var eb api.ErrorBody
			require.Equal(t, http.StatusUnprocessableEntity, ts.call(http.MethodPost, "/v1/tasks/bulk/retry", ts.admin, map[string]any{"status": "pending"}, &eb))
			require.Equal(t, "status", eb.Error.Details["field"], "retry applies to failed and cancelled tasks only")
			require.Equal(t, http.StatusUnprocessableEntity, ts.call(http.MethodPost, "/v1/tasks/bulk/cancel", ts.admin, map[string]any{"status": "success"}, &eb))
			require.Equal(t, http.StatusForbidden, ts.call(http.MethodPost, "/v1/tasks/bulk/cancel", ts.producer, map[string]any{}, &eb))
		})
	}
}

// TestBulkByConcurrencyKey: a bulk cancel by concurrency key takes that key's tasks only, and a
// bulk retry brings them back with their key.
func TestBulkByConcurrencyKey(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			ts.putQueue("held", map[string]any{"per_key_limit": 2})
			for i, key := range []string{"a", "a", "a", "b", "b"} {
				require.Equal(t, http.StatusCreated, ts.call(http.MethodPost, "/v1/tasks", ts.producer, map[string]any{
					"task_id": fmt.Sprintf("k-%d", i), "task_version": 1, "queue": "held", "concurrency_key": key}, nil))
			}
			require.Equal(t, api.NewTaskCancelResult(3, 0, false), ts.bulkCancel(map[string]any{"queue": "held", "concurrency_key": "a"}))
			for i, want := range []courier.TaskStatus{courier.TaskCancelled, courier.TaskCancelled, courier.TaskCancelled, courier.TaskPending, courier.TaskPending} {
				require.Equal(t, want, ts.get(fmt.Sprintf("k-%d", i), 1).Status, "k-%d", i)
			}
			require.Equal(t, api.NewTaskRetryResult(3, 0, false), ts.bulkRetry(map[string]any{"concurrency_key": "a"}))
			for i := range 3 {
				got := ts.get(fmt.Sprintf("k-%d", i), 1)
				require.Equal(t, courier.TaskPending, got.Status)
				require.Equal(t, "a", got.ConcurrencyKey, "a retry keeps the key")
			}
		})
	}
}
