package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
)

// TestRecordTaskHistories records task and sweeper workflow histories from real runs (make
// record-histories), each case only where its history is missing (writeNew: to record one
// again, delete it). On a queue without a heartbeat timeout (the push a local activity, the run
// waiting on its deadline's timer for the result as an update): a success, a failure that goes
// back to pending for a retry, a failure with the attempts spent (the run fails, "failed"), a
// cancel while processing, the processing deadline, a push tried again after a 503, and a
// result that arrived before the push was answered. On a queue with one (the push-and-wait
// activity the gateway completes): a success, a failure retried, and a heartbeat timeout. And
// one sweep. It also writes broken/task-success-not-recorded.json: heartbeat-success.json with
// the result's recorded mark removed, which must fail replay (the run would then record the
// result in a local activity the history has no marker for).
func TestRecordTaskHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	ts := newTaskStack(t, "sqlite")
	ctx := context.Background()
	token := ts.worker
	var mu sync.Mutex
	runs := map[string]string{} // case → run id of its first attempt
	noteRun := func(p api.TaskPush) {
		if d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID(p.TaskID, p.TaskVersion), ""); err == nil && p.Attempt == 1 {
			mu.Lock()
			runs[p.TaskID] = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			mu.Unlock()
		}
	}
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
		noteRun(p)
		switch p.TaskID {
		case "success", "success-final-state", "quiet-success":
			report(t, token, p, "success", 200, "parsed")
		case "heartbeat-success", "quiet-heartbeat-success":
			heartbeat(t, token, p)
			report(t, token, p, "success", 200, "parsed")
		case "retried", "heartbeat-retried":
			report(t, token, p, "failure", 503, "try later")
		case "failed", "quiet-failed":
			report(t, token, p, "failure", 422, "unparseable pdf")
		case "heartbeat-timeout", "cancelled", "quiet-cancelled", "processing-timeout":
			// silent
		}
	})
	retry := map[string]any{"initial_interval": "1h", "max_interval": "2h", "max_attempts": 3}
	ts.putQueue("plain", map[string]any{"push_url": w.url, "retry": retry})
	ts.putQueue("beat", map[string]any{"push_url": w.url, "heartbeat_timeout": "1s", "retry": retry})
	ts.putQueue("quick", map[string]any{"push_url": w.url, "processing_timeout": "2s", "retry": retry})
	ts.putQueue("hold", map[string]any{"push_url": w.url}) // it waits for the cancel
	ts.putQueue("once", map[string]any{"push_url": w.url, "retry": map[string]any{"max_attempts": 1}})
	// A worker that refuses the first try of a push with 503, and one that reports before it
	// answers the push.
	var tries sync.Map
	odd := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		n, _ := tries.LoadOrStore(p.TaskID, new(atomic.Int64))
		noteRun(p)
		switch {
		case p.TaskID == "push-retried" && n.(*atomic.Int64).Add(1) == 1:
			rw.Header().Set("Retry-After", "1")
			rw.WriteHeader(http.StatusServiceUnavailable)
			return
		case p.TaskID == "push-retried":
			go report(t, token, p, "success", 200, "second try")
		case p.TaskID == "result-before-push-answered":
			report(t, token, p, "success", 200, "eager")
		}
		rw.WriteHeader(http.StatusAccepted)
	}))
	defer odd.Close()
	ts.putQueue("odd", map[string]any{"push_url": odd.URL})
	// Every case is recorded from runs started as the claimer starts them now (QuietSuccess);
	// a recorded history is kept, so "success" shows the runs from before FinalState, the others
	// without "quiet-" those from before QuietSuccess (FinalState only), and the "quiet-" cases
	// the runs that write no state for a success.
	queues := map[string]string{"success": "plain", "success-final-state": "plain", "retried": "plain", "failed": "once", "cancelled": "hold",
		"processing-timeout": "quick", "push-retried": "odd", "result-before-push-answered": "odd",
		"heartbeat-success": "beat", "heartbeat-retried": "beat", "heartbeat-timeout": "beat",
		"quiet-success": "plain", "quiet-heartbeat-success": "beat", "quiet-failed": "once", "quiet-cancelled": "hold"}
	for id, q := range queues {
		require.Equal(t, http.StatusCreated, ts.insert(id, 1, 2, q))
	}
	ts.waitStatus("success", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("success-final-state", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("retried", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("failed", 1, courier.TaskFailed, time.Minute)
	ts.waitStatus("processing-timeout", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("push-retried", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("result-before-push-answered", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("heartbeat-success", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("heartbeat-retried", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("heartbeat-timeout", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("quiet-success", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("quiet-heartbeat-success", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("quiet-failed", 1, courier.TaskFailed, time.Minute)
	for _, c := range []string{"cancelled", "quiet-cancelled"} {
		require.Eventually(t, func() bool { return ts.get(c, 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)
		require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/"+c+"/versions/1", ts.producer, nil, nil))
	}

	closed := func(id, run string) bool {
		d, err := ts.tc.DescribeWorkflowExecution(ctx, id, run)
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories")
	for c := range queues {
		id := courier.TaskWorkflowID(c, 1)
		mu.Lock()
		run := runs[c]
		mu.Unlock()
		require.NotEmpty(t, run, c)
		require.Eventually(t, func() bool { return closed(id, run) }, time.Minute, 50*time.Millisecond, id)
		hist := history(t, ts.stack, id, run)
		writeNew(t, filepath.Join(dir, courier.KindTask.Workflow, c+".json"), hist)
		if c == "heartbeat-success" {
			writeNew(t, filepath.Join(dir, "broken", "task-success-not-recorded.json"), unrecorded(t, hist))
		}
	}

	// The sweeper's loop: a run that swept every 50 ms until it continued as new. (run.json is
	// a single sweep a schedule started, recorded before the loop.)
	require.NoError(t, tasks.EnsureSweeper(ctx, ts.tc, relay.DefaultTaskQueue, 50*time.Millisecond))
	d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskSweeperID, "")
	require.NoError(t, err)
	runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	require.Eventually(t, func() bool { return closed(courier.TaskSweeperID, runID) }, 2*time.Minute, 100*time.Millisecond)
	writeNew(t, filepath.Join(dir, courier.KindTaskSweeper.Workflow, "loop.json"), history(t, ts.stack, courier.TaskSweeperID, runID))
}

// unrecorded is a task run's history with the recorded mark taken off the result the gateway
// completed its push-and-wait with: a deliberately incompatible history.
func unrecorded(t *testing.T, hist *historypb.History) *historypb.History {
	t.Helper()
	out := proto.Clone(hist).(*historypb.History)
	dc := converter.GetDefaultDataConverter()
	changed := false
	for _, ev := range out.Events {
		a := ev.GetActivityTaskCompletedEventAttributes()
		if a == nil {
			continue
		}
		var r contract.AttemptResult
		require.NoError(t, dc.FromPayloads(a.GetResult(), &r))
		require.True(t, r.Outcome.Recorded, "the gateway recorded the result")
		r.Outcome.Recorded, r.Status = false, ""
		p, err := dc.ToPayloads(r)
		require.NoError(t, err)
		a.Result, changed = p, true
	}
	require.True(t, changed, "the history has the push-and-wait's completion")
	return out
}
