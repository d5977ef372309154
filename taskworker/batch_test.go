package taskworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

const resultsURL = "http://courier.invalid/v1/tasks/results"

// batchedPush is p as courier pushes it in the batched mode: with its delivery id and the
// results_url.
func batchedPush(id string, attempt int) taskworker.Push {
	p := pushOf(id, attempt, `1`, "", soon())
	p.DeliveryID = fmt.Sprintf("task/%s/1/%d", id, attempt)
	p.ResultsURL = resultsURL
	return p
}

// pushBatch sends a batched push signed with the rig's secret under webhook-id id and returns
// the status and the answer.
func (r *rig) pushBatch(t *testing.T, id string, ps ...taskworker.Push) (int, api.TaskPushBatchAnswer) {
	t.Helper()
	body, err := json.Marshal(taskworker.PushBatch{Tasks: ps, ResultsURL: resultsURL})
	require.NoError(t, err)
	return r.sendBatch(t, id, body)
}

func (r *rig) sendBatch(t *testing.T, id string, body []byte) (int, api.TaskPushBatchAnswer) {
	t.Helper()
	s, err := webhook.NewSigner(r.secret)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, id, time.Now(), body))
	code, _, out := r.send(t, body, h)
	var ans api.TaskPushBatchAnswer
	raw, err := json.Marshal(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &ans))
	return code, ans
}

// refusedOf lists "task/attempt code" of the refusals.
func refusedOf(a api.TaskPushBatchAnswer) []string {
	var out []string
	for _, r := range a.Refused {
		out = append(out, fmt.Sprintf("%s/%d %d", r.TaskID, r.Attempt, r.StatusCode))
	}
	sort.Strings(out)
	return out
}

// A batched push is verified like a single one and answered 202 naming the attempts refused on
// their own: a malformed one (400) and those beyond MaxConcurrent (429); one with no room for
// any attempt is a whole 429 with Retry-After. An attempt already running here is taken and
// starts nothing; an authentic copy of the whole push starts nothing and refuses nothing. The results of attempts pushed with a results_url go to POST
// /v1/tasks/results together, ResultBatchSize to a request.
func TestBatchedPushTakesOrRefusesEachAttempt(t *testing.T) {
	release := make(chan struct{})
	var calls sync.Map // task id → *atomic.Int32
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		n, _ := calls.LoadOrStore(task.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		if task.DeliveryID != fmt.Sprintf("task/%s/1/%d", task.ID, task.Attempt) || task.ResultsURL != resultsURL {
			return nil, fmt.Errorf("the task does not carry its delivery id and results url: %q %q", task.DeliveryID, task.ResultsURL)
		}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`"` + task.ID + `"`), nil
	}, func(c *taskworker.Config) { c.MaxConcurrent, c.ResultBatchSize, c.ResultLinger = 2, 2, time.Hour })
	callsOf := func(id string) int32 {
		n, ok := calls.Load(id)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}

	bad := batchedPush("b-bad", 0) // attempt 0: not a push
	code, ans := r.pushBatch(t, "task-batch/1", batchedPush("b-1", 1), bad, batchedPush("b-2", 1), batchedPush("b-3", 1))
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, []string{"b-3/1 429", "b-bad/0 400"}, refusedOf(ans))
	require.Equal(t, 2, r.w.Running())

	// A repeat taking b-1 again (running here: taken, not started) and b-4 (beyond the limit).
	code, ans = r.pushBatch(t, "task-batch/2", batchedPush("b-1", 1), batchedPush("b-4", 1))
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, []string{"b-4/1 429"}, refusedOf(ans))

	// An authentic copy of a push taken before: nothing starts, nothing is refused.
	body, err := json.Marshal(taskworker.PushBatch{Tasks: []taskworker.Push{batchedPush("b-5", 1)}, ResultsURL: resultsURL})
	require.NoError(t, err)
	s, err := webhook.NewSigner(r.secret)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, "task-batch/3", time.Now(), body))
	code, hdr, _ := r.send(t, body, h)
	require.Equal(t, http.StatusTooManyRequests, code, "no room for any attempt: the whole request is 429, as a single push's")
	require.NotEmpty(t, hdr.Get("Retry-After"))
	var out map[string]any
	code, _, out = r.send(t, body, h)
	require.Equal(t, http.StatusAccepted, code)
	require.Empty(t, out["refused"], "a replay refuses nothing")
	require.Zero(t, callsOf("b-5"))

	close(release)
	r.waitIdle(t)
	require.EqualValues(t, 1, callsOf("b-1"), "a running attempt pushed again starts nothing")
	require.EqualValues(t, 1, callsOf("b-2"))
	for _, id := range []string{"b-3", "b-4", "b-bad"} {
		require.Zero(t, callsOf(id), id)
	}
	batches := r.courier.resultBatches()
	require.Len(t, batches, 1, "two results, one request")
	got := map[string]api.TaskResult{}
	for _, it := range batches[0] {
		got[it.TaskID] = it.TaskResult
	}
	require.Equal(t, map[string]api.TaskResult{
		"b-1": {Attempt: 1, Status: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`"b-1"`)},
		"b-2": {Attempt: 1, Status: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`"b-2"`)},
	}, got)
	for _, rep := range r.courier.reports("result") {
		require.Equal(t, "Bearer "+workerKey, rep.Auth)
	}
}

// Batched pushes are refused whole like single ones when their signature is wrong (401), when
// their tasks are not a list (400) and during Shutdown (503).
func TestBatchedPushRefusedWhole(t *testing.T) {
	r := newRig(t, func(context.Context, *taskworker.Task) (json.RawMessage, error) { return nil, nil }, nil)
	body, err := json.Marshal(taskworker.PushBatch{Tasks: []taskworker.Push{batchedPush("w-1", 1)}, ResultsURL: resultsURL})
	require.NoError(t, err)
	other, err := webhook.GenerateSecret()
	require.NoError(t, err)
	s, err := webhook.NewSigner(other)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, "task-batch/x", time.Now(), body))
	code, _, _ := r.send(t, body, h)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _, _ = r.send(t, body, http.Header{})
	require.Equal(t, http.StatusUnauthorized, code, "unsigned")

	code, _ = r.sendBatch(t, "task-batch/y", []byte(`{"tasks":{"task_id":"w-2"}}`))
	require.Equal(t, http.StatusBadRequest, code)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.w.Shutdown(ctx))
	code, _ = r.sendBatch(t, "task-batch/z", body)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Empty(t, r.courier.reports("result"))
}

// Results in batches: one waits at most ResultLinger for others; each is answered on its own,
// a 503 tried again in a later request, a 409 final; a single push naming a results_url reports
// in batches too, and ResultBatchSize 1 sends each result alone to its task's route.
func TestResultsInBatches(t *testing.T) {
	r := newRig(t, func(context.Context, *taskworker.Task) (json.RawMessage, error) { return json.RawMessage(`1`), nil },
		func(c *taskworker.Config) { c.ResultLinger = 10 * time.Millisecond })
	r.courier.setAnswerItem(func(id string, n int) int {
		switch {
		case id == "r-again" && n == 1:
			return http.StatusServiceUnavailable
		case id == "r-over":
			return http.StatusConflict
		}
		return http.StatusAccepted
	})
	code, ans := r.pushBatch(t, "task-batch/r", batchedPush("r-again", 1), batchedPush("r-over", 1))
	require.Equal(t, http.StatusAccepted, code)
	require.Empty(t, ans.Refused)
	r.waitIdle(t)
	count := func(id string) int {
		n := 0
		for _, rep := range r.courier.reports("result") {
			if rep.TaskID == id {
				n++
			}
		}
		return n
	}
	require.Equal(t, 2, count("r-again"), "a 503 for one result is tried again")
	require.Equal(t, 1, count("r-over"), "a 409 is final")

	code, _, _ = r.push(t, batchedPush("r-single", 1), "")
	require.Equal(t, http.StatusAccepted, code)
	r.waitIdle(t)
	last := r.courier.resultBatches()
	require.Equal(t, "r-single", last[len(last)-1][0].TaskID, "a single push with a results_url reports in a batch")

	alone := newRig(t, func(context.Context, *taskworker.Task) (json.RawMessage, error) { return nil, nil },
		func(c *taskworker.Config) { c.ResultBatchSize = 1 })
	code, _ = alone.pushBatch(t, "task-batch/a", batchedPush("a-1", 1))
	require.Equal(t, http.StatusAccepted, code)
	reps := alone.waitReports(t, "result", 1)
	require.Equal(t, "a-1", reps[0].TaskID)
	require.Empty(t, alone.courier.resultBatches(), "ResultBatchSize 1: each result to its own route")
}

// Each push of a batched push carries its own task's W3C trace context, and the handler's
// context continues it (not the request's, which is the batch's): the handler's spans join
// each task's own trace.
func TestBatchedPushCarriesEachTasksTrace(t *testing.T) {
	const (
		batchTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		trace1     = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	var mu sync.Mutex
	got := map[string]string{} // task id → the trace id its handler ran in
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		mu.Lock()
		got[task.ID] = trace.SpanContextFromContext(ctx).TraceID().String()
		mu.Unlock()
		return nil, nil
	}, nil)
	own := batchedPush("tr-1", 1)
	own.Traceparent = trace1
	bare := batchedPush("tr-2", 1) // pushed without a trace of its own: the request's
	body, err := json.Marshal(taskworker.PushBatch{Tasks: []taskworker.Push{own, bare}, ResultsURL: resultsURL})
	require.NoError(t, err)
	s, err := webhook.NewSigner(r.secret)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, "task-batch/trace", time.Now(), body))
	h.Set("traceparent", batchTrace)
	code, _, out := r.send(t, body, h)
	require.Equal(t, http.StatusAccepted, code, out)
	r.waitIdle(t)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]string{
		"tr-1": "4bf92f3577b34da6a3ce929d0e0e4736",
		"tr-2": "0af7651916cd43dd8448eb211c80319c",
	}, got)
}
