package integration

import (
	"context"
	"encoding/json"
	"fmt"
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
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/tasks"
)

// TestRecordTaskHistories records task and sweeper workflow histories from real runs (make
// record-histories): a success, a failure that goes back to pending for a retry, a failure
// with the attempts spent (the run fails, "failed"), a failure by
// heartbeat timeout, a cancel while processing, a push tried again after a 503, a result that
// arrived before the push was answered, and one sweep. The histories recorded before the push
// and the wait were split (task/single-push-*.json, task-sweeper/run-shared-queue.json) are
// kept beside them and never re-recorded: they are what runs started by older workers look
// like. So are success.json … result-before-push-answered.json, recorded before the claimer
// started attempts with a code version (they ask workflow.GetVersion), and <case>-v1.json,
// recorded with version 1 (the split push and wait). These runs write <case>-v<version>.json
// with the version the claimer chose for the attempt (5, or 4 on the queue with a heartbeat
// timeout), each only when it is missing, as the sweeper's run.json.
func TestRecordTaskHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	ts := newTaskStack(t, "sqlite")
	ctx := context.Background()
	token := ts.worker
	var mu sync.Mutex
	runs := map[string]string{} // case → run id of its first attempt
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
		if p.Attempt == 1 {
			d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID(p.TaskID, p.TaskVersion), "")
			if err == nil {
				mu.Lock()
				runs[p.TaskID] = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
				mu.Unlock()
			}
		}
		switch p.TaskID {
		case "success":
			heartbeat(t, token, p)
			report(t, token, p, "success", 200, "parsed")
		case "retried":
			report(t, token, p, "failure", 503, "try later")
		case "failed":
			report(t, token, p, "failure", 422, "unparseable pdf")
		case "heartbeat-timeout", "cancelled":
			// silent
		}
	})
	ts.putQueue("default", map[string]any{"push_url": w.url, "heartbeat_timeout": "1s",
		"retry": map[string]any{"initial_interval": "1h", "max_interval": "2h", "max_attempts": 3}})
	ts.putQueue("plain", map[string]any{"push_url": w.url, // no heartbeat timeout: version 5 (workflows.TaskLocalPushV)
		"retry": map[string]any{"initial_interval": "1h", "max_interval": "2h", "max_attempts": 3}})
	ts.putQueue("hold", map[string]any{"push_url": w.url}) // no heartbeat timeout: it waits for the cancel
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
		if d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID(p.TaskID, p.TaskVersion), ""); err == nil {
			mu.Lock()
			runs[p.TaskID] = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			mu.Unlock()
		}
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
	require.Equal(t, http.StatusCreated, ts.insert("heartbeat-timeout", 1, 2, "default"))
	for _, id := range []string{"success", "retried"} {
		require.Equal(t, http.StatusCreated, ts.insert(id, 1, 2, "plain"))
	}
	require.Equal(t, http.StatusCreated, ts.insert("cancelled", 1, 2, "hold"))
	require.Equal(t, http.StatusCreated, ts.insert("failed", 1, 2, "once"))
	for _, id := range []string{"push-retried", "result-before-push-answered"} {
		require.Equal(t, http.StatusCreated, ts.insert(id, 1, 2, "odd"))
	}
	ts.waitStatus("success", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("retried", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("failed", 1, courier.TaskFailed, time.Minute)
	ts.waitStatus("heartbeat-timeout", 1, courier.TaskPending, time.Minute)
	ts.waitStatus("push-retried", 1, courier.TaskSuccess, time.Minute)
	ts.waitStatus("result-before-push-answered", 1, courier.TaskSuccess, time.Minute)
	require.Eventually(t, func() bool { return ts.get("cancelled", 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)
	require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/cancelled/versions/1", ts.producer, nil, nil))

	closed := func(id, run string) bool {
		d, err := ts.tc.DescribeWorkflowExecution(ctx, id, run)
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories", "task")
	for _, c := range []string{"success", "retried", "failed", "heartbeat-timeout", "cancelled", "push-retried", "result-before-push-answered"} {
		id := courier.TaskWorkflowID(c, 1)
		mu.Lock()
		run := runs[c]
		mu.Unlock()
		require.NotEmpty(t, run, c)
		require.Eventually(t, func() bool { return closed(id, run) }, time.Minute, 50*time.Millisecond, id)
		// The version the claimer chose for the attempt (tasks.AttemptCodeVersion): the
		// queue's heartbeat timeout decides. Histories of a version recorded before are kept.
		d, err := ts.tc.DescribeWorkflowExecution(ctx, id, run)
		require.NoError(t, err)
		var v int
		require.NoError(t, converter.GetDefaultDataConverter().FromPayload(d.GetWorkflowExecutionInfo().GetMemo().GetFields()["code_version"], &v))
		writeNew(t, filepath.Join(dir, fmt.Sprintf("%s-v%d.json", c, v)), history(t, ts.stack, id, run))
	}

	h := ts.tc.ScheduleClient().GetHandle(ctx, tasks.SweeperScheduleID)
	require.NoError(t, h.Trigger(ctx, client.ScheduleTriggerOptions{}))
	var wfID, runID string
	require.Eventually(t, func() bool {
		desc, err := h.Describe(ctx)
		if err != nil || len(desc.Info.RecentActions) == 0 {
			return false
		}
		wfID = desc.Info.RecentActions[0].StartWorkflowResult.WorkflowID
		runID = desc.Info.RecentActions[0].StartWorkflowResult.FirstExecutionRunID
		return closed(wfID, runID)
	}, time.Minute, 100*time.Millisecond)
	writeNew(t, filepath.Join("..", "workflows", "testdata", "histories", "task-sweeper", "run.json"), history(t, ts.stack, wfID, runID))
}
