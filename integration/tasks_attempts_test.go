package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
	"github.com/courier-oss/courier/workflows"
)

// codes collects HTTP status codes from several goroutines.
type codes struct {
	mu   sync.Mutex
	list []int
}

func (c *codes) add(code int) {
	c.mu.Lock()
	c.list = append(c.list, code)
	c.mu.Unlock()
}

func (c *codes) all() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.list...)
}

// TestTasksSlowAcceptThenHeartbeats (issue 8 item 5): with heartbeat_timeout 2s, a worker that
// takes 3 s to answer its push and then heartbeats every second succeeds on its first attempt,
// with one push: the heartbeat timeout starts once the worker has the task. A worker that
// heartbeats while it is still answering the push is not refused either.
func TestTasksSlowAcceptThenHeartbeats(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		token := ts.worker
		var pushes atomic.Int64
		var heartbeats, results codes
		var wg sync.WaitGroup
		t.Cleanup(wg.Wait)
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			var p api.TaskPush
			if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			pushes.Add(1)
			// The worker takes 3 s to accept: it sleeps to stand for a slow accept (a queue of its
			// own, a busy HTTP server). The busy one heartbeats meanwhile, the other does not.
			for i := 0; i < 3; i++ {
				time.Sleep(time.Second) // the slow accept itself (see above)
				if p.TaskID == "busy-accept" {
					heartbeats.add(heartbeat(t, token, p))
				}
			}
			wg.Add(1)
			go func() { // then it works for 4 s, heartbeating every second, and reports
				defer wg.Done()
				for i := 0; i < 4; i++ {
					time.Sleep(time.Second) // work between heartbeats
					heartbeats.add(heartbeat(t, token, p))
				}
				results.add(report(t, token, p, "success", 200, "parsed"))
			}()
			rw.WriteHeader(http.StatusAccepted)
		}))
		t.Cleanup(srv.Close)
		ts.putQueue("default", map[string]any{"push_url": srv.URL, "heartbeat_timeout": "2s", "processing_timeout": "1m",
			"retry": map[string]any{"initial_interval": "1s", "max_attempts": 3}})

		for _, id := range []string{"slow-accept", "busy-accept"} {
			require.Equal(t, http.StatusCreated, ts.insert(id, 1, 2, "default"))
		}
		for _, id := range []string{"slow-accept", "busy-accept"} {
			got := ts.waitStatus(id, 1, courier.TaskSuccess, time.Minute)
			require.Equal(t, 1, got.Attempt, "%s: no heartbeat timeout, no second attempt (message %q)", id, got.Message)
			require.Equal(t, "parsed", got.Message)
		}
		require.EqualValues(t, 2, pushes.Load(), "one push per task: none repeated")
		wg.Wait()
		for _, code := range heartbeats.all() {
			require.Equal(t, http.StatusOK, code, "every heartbeat is accepted, also those sent while the push was being answered")
		}
		require.Len(t, heartbeats.all(), 11)
		require.Equal(t, []int{http.StatusAccepted, http.StatusAccepted}, results.all())
		require.Equal(t, 0, ts.inFlight("default"))
	})
}

// TestTasksResultBeforeThePushIsAnswered (issue 8 item 5): a worker that reports its result
// before it answers the push (the run's workflow task that pushes is still open, or its
// push-and-wait is still pushing) has the result accepted and recorded; a repeat of it after
// the attempt ended is refused. With and without a heartbeat timeout.
func TestTasksResultBeforeThePushIsAnswered(t *testing.T) {
	eachWait(t, testResultBeforeThePushIsAnswered)
}

// eachWait runs a test on a queue without a heartbeat timeout (the attempt's run waits for the
// result itself, which the gateway hands over as an update) and on one with (the run waits in
// its push-and-wait activity, which the gateway completes): queue is the setting to add to the
// test's queue.
func eachWait(t *testing.T, test func(t *testing.T, ts *taskStack, queue map[string]any)) {
	t.Run("no heartbeat timeout", func(t *testing.T) { test(t, newTaskStack(t, "sqlite"), map[string]any{}) })
	t.Run("heartbeat timeout", func(t *testing.T) {
		test(t, newTaskStack(t, "sqlite"), map[string]any{"heartbeat_timeout": "30s"})
	})
}

// withQueue is a queue's settings with extra ones added.
func withQueue(q map[string]any, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range q {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func testResultBeforeThePushIsAnswered(t *testing.T, ts *taskStack, queue map[string]any) {
	token := ts.worker
	var results codes
	var pushed sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		pushed.Store(p.TaskID, p)
		results.add(report(t, token, p, "success", 200, "done before answering"))
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	ts.putQueue("default", withQueue(map[string]any{"push_url": srv.URL, "processing_timeout": "1m"}, queue))

	require.Equal(t, http.StatusCreated, ts.insert("eager", 1, 2, "default"))
	got := ts.waitStatus("eager", 1, courier.TaskSuccess, time.Minute)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, "done before answering", got.Message)
	require.JSONEq(t, `{"task":"eager","attempt":1}`, string(got.Result))
	// The success is stored before courier answers the report, so wait for the answer.
	waitFor(t, "the worker hears its result answered", func() bool { return len(results.all()) > 0 })
	require.Equal(t, []int{http.StatusAccepted}, results.all())
	p, ok := pushed.Load("eager")
	require.True(t, ok)
	require.Equal(t, http.StatusConflict, report(t, token, p.(api.TaskPush), "failure", 500, "again"), "the attempt is over")
	require.Equal(t, 0, ts.inFlight("default"))
}

// stuckEndpoint accepts pushes and never answers them; it counts the pushes it holds and those
// courier gave up on (closed the connection).
type stuckEndpoint struct {
	url      string
	received atomic.Int64
	dropped  atomic.Int64
}

func startStuckEndpoint(t *testing.T) *stuckEndpoint {
	s := &stuckEndpoint{}
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		s.received.Add(1)
		select {
		case <-r.Context().Done():
			s.dropped.Add(1)
		case <-done:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // runs first: the held requests end, then the server closes
	s.url = srv.URL
	return s
}

// TestTasksStuckPushEndpointDelaysNothingElse (issue 8 item 7): a queue whose push endpoint
// accepts connections and never answers holds every push slot of the only worker, whose other
// bounds are as small. Meanwhile an outbox record is delivered and another queue's task,
// already pushed, reports and is finished (its slot released), all while every stuck push is
// still held: pushes, finishes and outbox deliveries do not share slots.
func TestTasksStuckPushEndpointDelaysNothingElse(t *testing.T) {
	const slots = 3
	ts := newTaskStackTuned(t, "sqlite", 5*time.Second, func(c *worker.Config) {
		c.DisableRelay = false
		c.MaxConcurrentActivities = slots // outbox deliveries
		c.Tasks.PushSlots = slots
		c.Tasks.FinishSlots = slots
	})
	ts.createStream("ORDERS", "orders.>")
	ctx := t.Context()
	token := ts.worker
	release := make(chan struct{})
	good := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
		<-release
		report(t, token, p, "success", 200, "fine")
	})
	stuck := startStuckEndpoint(t)
	ts.putQueue("good", map[string]any{"push_url": good.url})
	ts.putQueue("stuck", map[string]any{"push_url": stuck.url, "concurrency_limit": 2 * slots,
		"push_timeout": "10m", "processing_timeout": "1h"})

	require.Equal(t, http.StatusCreated, ts.insert("good-1", 1, 2, "good"))
	require.Eventually(t, func() bool { return good.pushes.Load() == 1 }, time.Minute, 20*time.Millisecond, "the good task is pushed")
	for i := 0; i < 2*slots; i++ {
		require.Equal(t, http.StatusCreated, ts.insert("stuck-"+string(rune('a'+i)), 1, 2, "stuck"))
	}
	require.Eventually(t, func() bool { return stuck.received.Load() == slots }, time.Minute, 20*time.Millisecond,
		"every push slot is held by the stuck endpoint")

	var ids []int64
	require.NoError(t, ts.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`{"order":1}`)})
		return err
	}))
	close(release)

	got := ts.waitStatus("good-1", 1, courier.TaskSuccess, time.Minute)
	require.Equal(t, "fine", got.Message)
	require.Equal(t, 0, ts.inFlight("good"), "the good task's slot is released")
	require.Eventually(t, func() bool { return ts.countByStatus()[courier.OutboxSent] == 1 }, time.Minute, 20*time.Millisecond,
		"the outbox record is delivered")
	counts, _ := ts.streamIDs("ORDERS")
	require.Equal(t, 1, counts[idString(ids[0])])

	require.EqualValues(t, slots, stuck.received.Load(), "the stuck pushes still hold their slots")
	require.Zero(t, stuck.dropped.Load(), "and none was given up: everything above happened while they were held")
	require.Equal(t, 2*slots, ts.inFlight("stuck"))
}

// gatedCancel holds the task service's workflow cancels until the test opens the gate.
type gatedCancel struct {
	client.Client
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedCancel) CancelWorkflow(ctx context.Context, workflowID, runID string) error {
	close(g.entered)
	<-g.gate
	return g.Client.CancelWorkflow(ctx, workflowID, runID)
}

// TestTasksCancelTargetsTheAttemptsRun (issue 8 item 10): a cancel whose workflow cancel is
// slow, while the task is re-submitted and its new attempt already runs under the same
// workflow id, cancels only the attempt it cancelled: the new attempt's run gets no cancel
// request and its result is recorded.
func TestTasksCancelTargetsTheAttemptsRun(t *testing.T) {
	ts := newTaskStackRecovering(t, "sqlite", time.Hour)
	ctx := t.Context()
	token := ts.worker
	second := make(chan api.TaskPush, 1)
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
		if p.Attempt == 2 {
			second <- p // the test reports for it; attempt 1 is never reported
		}
	})
	ts.putQueue("default", map[string]any{"push_url": w.url, "processing_timeout": "10m"})
	require.Equal(t, http.StatusCreated, ts.insert("again", 1, 3, "default"))
	require.Eventually(t, func() bool { return ts.get("again", 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)

	gated := &gatedCancel{Client: ts.tc, entered: make(chan struct{}), gate: make(chan struct{})}
	svc := tasks.NewService(ts.store, gated, ts.ts.GetDefaultNamespace(), ts.w.WakeTasks, nil, quiet)
	cancelled := make(chan error, 1)
	go func() {
		_, err := svc.Cancel(ctx, "again", 1)
		cancelled <- err
	}()
	<-gated.entered // the row is cancelled and its slot free; the workflow cancel is on its way

	require.Equal(t, http.StatusOK, ts.call(http.MethodPost, "/v1/tasks", ts.producer, map[string]any{
		"task_id": "again", "task_version": 1, "payload": map[string]any{"life": 2}}, nil))
	var p2 api.TaskPush
	select {
	case p2 = <-second:
	case <-time.After(time.Minute):
		t.Fatal("the re-submitted task was never pushed")
	}
	d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID("again", 1), "")
	require.NoError(t, err)
	run2 := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	close(gated.gate)
	require.NoError(t, <-cancelled)
	for _, ev := range history(t, ts.stack, courier.TaskWorkflowID("again", 1), run2).GetEvents() {
		require.NotEqual(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED, ev.GetEventType(),
			"the cancel of attempt 1 reached the run of attempt 2")
	}
	require.Equal(t, http.StatusAccepted, report(t, token, p2, "success", 200, "second life"))
	got := ts.waitStatus("again", 1, courier.TaskSuccess, time.Minute)
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, "second life", got.Message)
	require.Equal(t, 0, ts.inFlight("default"))
}

// TestTaskSuccessIsRecordedWhenAccepted: once a success is answered 202, the row already holds
// it and the queue's slot is free (the next task can be claimed without waiting for the
// attempt's workflow to run its finish); the workflow then finds the same success recorded and
// ends with it. A repeated success is a conflict and changes nothing. With and without a
// heartbeat timeout, and PostgreSQL's one-statement finish.
func TestTaskSuccessIsRecordedWhenAccepted(t *testing.T) {
	eachWait(t, testSuccessRecordedWhenAccepted)
	t.Run("postgres", func(t *testing.T) { testSuccessRecordedWhenAccepted(t, newTaskStack(t, "postgres"), map[string]any{}) })
	// In the batched mode the row is the only place a result goes: no run waits for it.
	for _, d := range testenv.Dialects {
		t.Run("batched/"+d, func(t *testing.T) {
			testSuccessRecordedWhenAccepted(t, newTaskStackIn(t, d, courier.DispatchBatched), map[string]any{"heartbeat_timeout": "30s"})
		})
	}
}

func testSuccessRecordedWhenAccepted(t *testing.T, ts *taskStack, queue map[string]any) {
	type seen struct {
		push         api.TaskPush
		code, repeat int
		task         courier.Task
		queue        courier.Queue
		taskOK       bool
	}
	after := make(chan seen, 1)
	// The gateway is slow to write its answers, as under load, so the slot's hold can be seen
	// while the 202 is on its way.
	ts.resultAnswerDelay.Store(int64(300 * time.Millisecond))
	w := startTaskWorker(t, func(_ *taskWorker, p api.TaskPush) {
		// While the answer is on its way, the queue as the database has it once the row holds
		// the success.
		held := make(chan courier.Queue, 1)
		go func() {
			for range 250 {
				if task, err := ts.store.GetTask(context.Background(), p.TaskID, p.TaskVersion); err == nil && task.Status == courier.TaskSuccess {
					q, _ := ts.store.GetQueue(context.Background(), p.Queue)
					held <- q
					return
				}
				time.Sleep(time.Millisecond)
			}
			held <- courier.Queue{InFlight: -1}
		}()
		code := report(t, ts.worker, p, "success", 200, "3 pages")
		// Read at once, straight from the database: no waiting for the workflow.
		task, err := ts.store.GetTask(context.Background(), p.TaskID, p.TaskVersion)
		q, qerr := <-held, error(nil)
		ts.resultAnswerDelay.Store(0)
		// A worker that lost its 202 reports again.
		repeat := report(t, ts.worker, p, "success", 200, "3 pages")
		after <- seen{push: p, code: code, repeat: repeat, task: task, queue: q, taskOK: err == nil && qerr == nil}
	})
	ts.putQueue("default", withQueue(map[string]any{"push_url": w.url, "concurrency_limit": 1, "processing_timeout": "1m"}, queue))
	require.Equal(t, http.StatusCreated, ts.insert("done-at-once", 1, 3, "default"))

	var got seen
	select {
	case got = <-after:
	case <-time.After(time.Minute):
		t.Fatal("no push")
	}
	require.Equal(t, http.StatusAccepted, got.code)
	require.Equal(t, http.StatusConflict, got.repeat, "the same success again: the attempt has its outcome")
	require.True(t, got.taskOK)
	require.Equal(t, courier.TaskSuccess, got.task.Status, "the row holds the success when the 202 goes out")
	require.Equal(t, 200, got.task.StatusCode)
	require.Equal(t, "3 pages", got.task.Message)
	require.JSONEq(t, `{"task":"done-at-once","attempt":1}`, string(got.task.Result))
	require.NotNil(t, got.task.FinishedAt)
	require.Equal(t, 1, got.queue.InFlight, "the slot stays held while the 202 is on its way (docs/tasks.md, the limit as a worker counts it)")
	require.Eventually(t, func() bool { return ts.inFlight("default") == 0 }, 10*time.Second, 10*time.Millisecond,
		"the slot is released once the 202 is written")

	if ts.mode == courier.DispatchBatched {
		final := ts.get("done-at-once", 1)
		require.Equal(t, courier.TaskSuccess, final.Status)
		require.True(t, got.task.FinishedAt.Equal(*final.FinishedAt), "written once")
		require.True(t, strings.HasPrefix(final.WorkflowID, "task-batch/"), final.WorkflowID)
		var res contract.PushBatchResult
		require.NoError(t, ts.tc.GetWorkflow(t.Context(), final.WorkflowID, "").Get(t.Context(), &res))
		require.Equal(t, contract.PushBatchResult{Pushed: 1}, res, "the batch's run pushed it and ended")
		require.Equal(t, http.StatusConflict, report(t, ts.worker, got.push, "failure", 500, "late"), "a different outcome is refused")
		require.Equal(t, http.StatusConflict, heartbeat(t, ts.worker, got.push), "the attempt is over")
		require.Equal(t, "3 pages", ts.get("done-at-once", 1).Message)
		require.Equal(t, 0, ts.inFlight("default"), "the slot was released once")
		return
	}
	var res workflows.TaskRunResult
	require.NoError(t, ts.tc.GetWorkflow(t.Context(), courier.TaskWorkflowID("done-at-once", 1), "").Get(t.Context(), &res))
	require.True(t, res.Applied, "the run's outcome is the one in the row")
	require.Equal(t, courier.TaskSuccess, res.Status)
	final := ts.get("done-at-once", 1)
	require.Equal(t, courier.TaskSuccess, courier.TaskStatus(final.Status))
	require.NotNil(t, final.FinishedAt)
	require.True(t, got.task.FinishedAt.Equal(*final.FinishedAt), "written once: the workflow's finish changed nothing (%s, then %s)", got.task.FinishedAt, final.FinishedAt)
	require.Equal(t, 0, ts.inFlight("default"), "the slot was released once")
	require.Equal(t, http.StatusConflict, report(t, ts.worker, got.push, "success", 200, "3 pages"), "a repeat after the run ended")
	require.Equal(t, http.StatusConflict, report(t, ts.worker, got.push, "failure", 500, "late"), "a different outcome is refused")
	require.Equal(t, "3 pages", ts.get("done-at-once", 1).Message)

	// The run ends on the recorded success without a finish of its own (no marker for one),
	// and writes no CourierState: it started without one and its Completed status says the
	// success (docs/operations.md), so a success costs no upsert event or billable action.
	// Without a heartbeat timeout: started, a workflow task with the local push's marker, the
	// deadline's timer, a workflow task with the result's update accepted and completed,
	// completed (12 events). With one: started, a workflow task, the push-and-wait scheduled,
	// started and completed by the gateway, a workflow task, completed (11 events).
	var (
		p       workflows.TaskParams
		events  int
		markers int
		upserts int
	)
	it := ts.tc.GetWorkflowHistory(t.Context(), courier.TaskWorkflowID("done-at-once", 1), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events++
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(e.GetWorkflowExecutionStartedEventAttributes().GetInput(), &p))
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			markers++
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			upserts++
		}
	}
	require.True(t, p.QuietSuccess, "the claimer starts runs that write no state for a success")
	require.Zero(t, upserts, "a success writes no CourierState")
	d, err := ts.tc.DescribeWorkflowExecution(t.Context(), courier.TaskWorkflowID("done-at-once", 1), "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.GetWorkflowExecutionInfo().GetStatus())
	_, hasState := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[courier.SAState]
	require.False(t, hasState, "Completed without a CourierState: a success")
	if p.HeartbeatTimeout > 0 {
		require.Zero(t, markers, "no finish for a recorded success")
		require.Equal(t, 11, events)
	} else {
		require.Equal(t, 1, markers, "the push's local activity, and no finish")
		require.Equal(t, 12, events)
	}
}
