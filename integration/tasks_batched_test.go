package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/testenv"
)

// batchWorker is a real HTTP task worker for batched pushes: it takes every api.TaskPushBatch
// (refusing the attempts refuse names), holds each attempt from its push until handle is done
// with it, and records the most it held at once and every delivery id it saw.
type batchWorker struct {
	t      *testing.T
	url    string
	refuse func(p api.TaskPush) bool // nil: take all
	handle func(w *batchWorker, ps []api.TaskPush)

	mu        sync.Mutex
	held      map[pushKey]bool
	max       int
	requests  atomic.Int64
	pushes    atomic.Int64
	delivered map[string]int // delivery id → times seen
	wg        sync.WaitGroup
}

func startBatchWorker(t *testing.T, refuse func(api.TaskPush) bool, handle func(w *batchWorker, ps []api.TaskPush)) *batchWorker {
	w := &batchWorker{t: t, refuse: refuse, handle: handle, held: map[pushKey]bool{}, delivered: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var b api.TaskPushBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || len(b.Tasks) == 0 {
			http.Error(rw, "not a batched push", http.StatusBadRequest)
			return
		}
		w.requests.Add(1)
		var ans api.TaskPushBatchAnswer
		var taken []api.TaskPush
		w.mu.Lock()
		for _, p := range b.Tasks {
			w.delivered[p.DeliveryID]++
			if w.refuse != nil && w.refuse(p) {
				ans.Refused = append(ans.Refused, api.TaskRefusal{TaskID: p.TaskID, TaskVersion: p.TaskVersion, Attempt: p.Attempt,
					StatusCode: http.StatusTooManyRequests, Message: "busy"})
				continue
			}
			w.held[keyOf(p)] = true
			taken = append(taken, p)
		}
		w.max = max(w.max, len(w.held))
		w.mu.Unlock()
		w.pushes.Add(int64(len(taken)))
		if len(taken) > 0 {
			w.wg.Add(1)
			go func() {
				defer w.wg.Done()
				w.handle(w, taken)
				w.letGo(taken...)
			}()
		}
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(ans)
	}))
	t.Cleanup(func() { srv.Close(); w.wg.Wait() })
	w.url = srv.URL
	return w
}

func (w *batchWorker) letGo(ps ...api.TaskPush) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range ps {
		delete(w.held, keyOf(p))
	}
}

func (w *batchWorker) maxConcurrent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// reportAll posts the results of ps in one POST /v1/tasks/results and returns the answer.
func reportAll(t *testing.T, token string, ps []api.TaskPush, status courier.OutcomeKind) api.TaskResultsAnswer {
	t.Helper()
	req := api.TaskResults{}
	for _, p := range ps {
		req.Results = append(req.Results, api.TaskResultItem{TaskID: p.TaskID, TaskVersion: p.TaskVersion, TaskResult: api.TaskResult{Attempt: p.Attempt,
			Status: status, StatusCode: 200, Message: "done", Result: json.RawMessage(fmt.Sprintf(`{"task":%q}`, p.TaskID))}})
	}
	body, err := json.Marshal(req)
	require.NoError(t, err)
	hreq, err := http.NewRequest(http.MethodPost, ps[0].ResultsURL, strings.NewReader(string(body)))
	require.NoError(t, err)
	hreq.Header.Set("Authorization", "Bearer "+token)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return api.TaskResultsAnswer{} // the test is ending
	}
	defer resp.Body.Close()
	var ans api.TaskResultsAnswer
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&ans))
	}
	return ans
}

// TestBatchedTasksEndToEnd: a queue in the batched mode with batched pushes and batched results
// runs every task to success from a handful of batch runs, each a workflow Temporal has; an
// attempt the worker refuses in its answer ends as a failure and comes back as the next
// attempt; the worker never holds more than the limit.
func TestBatchedTasksEndToEnd(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			token := ts.worker
			var refusedOnce sync.Map
			w := startBatchWorker(t, func(p api.TaskPush) bool {
				_, seen := refusedOnce.LoadOrStore(p.TaskID, true)
				return p.TaskID == "b-7" && !seen // refused at its first attempt
			}, func(w *batchWorker, ps []api.TaskPush) {
				ans := reportAll(t, token, ps, courier.OutcomeSuccess)
				for _, a := range ans.Results {
					if a.Status != http.StatusAccepted {
						t.Errorf("result of %s/%d: %d %+v", a.TaskID, a.Attempt, a.Status, a.Error)
					}
				}
			})
			const n, limit = 300, 40
			ts.putQueue("bulk", map[string]any{"concurrency_limit": limit, "dispatch_mode": "batched", "push_batch_size": 25,
				"retry": map[string]any{"initial_interval": "1s"}})
			for i := range n {
				require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("b-%d", i), 1, 1+i%5, "bulk"))
			}
			ts.putQueue("bulk", map[string]any{"concurrency_limit": limit, "dispatch_mode": "batched", "push_batch_size": 25,
				"retry": map[string]any{"initial_interval": "1s"}, "push_url": w.url})
			require.Eventually(t, func() bool {
				st, err := ts.store.TaskStats(t.Context())
				require.NoError(t, err)
				return st.ByQueueStatus["bulk"][courier.TaskSuccess] == n
			}, 2*time.Minute, 100*time.Millisecond, "every task succeeds")
			require.LessOrEqual(t, w.maxConcurrent(), limit, "the worker never holds more than the limit")
			require.EqualValues(t, n, w.pushes.Load(), "one taken push per task")
			require.Eventually(t, func() bool { return ts.inFlight("bulk") == 0 }, 10*time.Second, 50*time.Millisecond)

			refused := ts.get("b-7", 1)
			require.Equal(t, 2, refused.Attempt, "the refused attempt ended, and the next one succeeded")
			require.Equal(t, 2, refused.Attempts)

			// Every task names the batch run that pushed it, and Temporal has that run.
			batches := map[string]bool{}
			for i := range n {
				got := ts.get(fmt.Sprintf("b-%d", i), 1)
				require.True(t, strings.HasPrefix(got.WorkflowID, "task-batch/bulk/"), got.WorkflowID)
				batches[got.WorkflowID] = true
			}
			for id := range batches {
				desc, err := ts.tc.DescribeWorkflowExecution(t.Context(), id, "")
				require.NoError(t, err, "batch run %s", id)
				require.Equal(t, "task-batch", desc.GetWorkflowExecutionInfo().GetType().GetName())
			}
			t.Logf("%s: %d tasks from %d batch runs in %d pushes", d, n, len(batches), w.requests.Load())
			require.Less(t, len(batches), n/5, "batch runs, not one run per task")
		})
	}
}
