package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
)

// taskWorker is a real HTTP task worker: it accepts pushes, then runs handle for each in its
// own goroutine. It records the most pushes it ever held at once (from the push until handle
// let go of it, or returned) and the order of pushes.
type taskWorker struct {
	t      *testing.T
	url    string
	handle func(p api.TaskPush) // runs after the push was accepted
	mu     sync.Mutex
	held   map[pushKey]bool
	max    int
	order  []api.TaskPush
	// keyHeld and keyMax are the pushes held now and at most, by concurrency key.
	keyHeld map[string]int
	keyMax  map[string]int
	pushes  atomic.Int64
	wg      sync.WaitGroup
}

func startTaskWorker(t *testing.T, handle func(w *taskWorker, p api.TaskPush)) *taskWorker {
	w := &taskWorker{t: t, held: map[pushKey]bool{}, keyHeld: map[string]int{}, keyMax: map[string]int{}}
	w.handle = func(p api.TaskPush) { handle(w, p) }
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.held[keyOf(p)] = true
		w.max = max(w.max, len(w.held))
		w.keyHeld[p.ConcurrencyKey]++
		w.keyMax[p.ConcurrencyKey] = max(w.keyMax[p.ConcurrencyKey], w.keyHeld[p.ConcurrencyKey])
		w.order = append(w.order, p)
		w.mu.Unlock()
		w.pushes.Add(1)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer w.letGo(p)
			w.handle(p)
		}()
		rw.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(func() { srv.Close(); w.wg.Wait() })
	w.url = srv.URL
	return w
}

// pushKey names one attempt of one task.
type pushKey struct {
	id      string
	version int64
	attempt int
}

func keyOf(p api.TaskPush) pushKey {
	return pushKey{id: p.TaskID, version: p.TaskVersion, attempt: p.Attempt}
}

// letGo ends the worker's hold on a push. A push is held until its handler returns, which for
// a handler that reports its result is once the report has been answered: the way a worker
// counts its capacity (courier hands out the slot a result frees only after its answer). A
// handler that hands work on without reporting calls it itself.
func (w *taskWorker) letGo(p api.TaskPush) {
	w.mu.Lock()
	if w.held[keyOf(p)] {
		delete(w.held, keyOf(p))
		w.keyHeld[p.ConcurrencyKey]--
	}
	w.mu.Unlock()
}

func (w *taskWorker) maxConcurrent() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

// maxByKey is the most pushes of each concurrency key the worker held at once.
func (w *taskWorker) maxByKey() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.keyMax)
}

func (w *taskWorker) pushOrder() []api.TaskPush {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]api.TaskPush(nil), w.order...)
}

// dispatchModes are a queue's dispatch modes (docs/tasks.md, "Dispatch modes"). A guarantee
// whose mechanism differs between them (the push, the deadlines, the result's way to the row)
// is tested in both; one decided by the claim or the insert alone, shared by both, in the
// default.
var dispatchModes = []courier.DispatchMode{courier.DispatchPerAttempt, courier.DispatchBatched}

// eachMode runs test once per dispatch mode, as subtests named after it; test sets the mode on
// its stacks (taskStack.mode), which putQueue gives their queues.
func eachMode(t *testing.T, test func(t *testing.T, mode courier.DispatchMode)) {
	for _, m := range dispatchModes {
		t.Run(string(m), func(t *testing.T) { test(t, m) })
	}
}

// eachModeSlow is eachMode for the slow tests of what the claim decides, which both modes
// share (band shares, keys): there the batched mode differs only in its push path, which the
// other tests cover on both databases, so it runs on PostgreSQL only.
func eachModeSlow(t *testing.T, dialect string, test func(t *testing.T, mode courier.DispatchMode)) {
	for _, m := range dispatchModes {
		if m == courier.DispatchBatched && dialect != "postgres" {
			continue
		}
		t.Run(string(m), func(t *testing.T) { test(t, m) })
	}
}

// eachModeOn runs test in each dispatch mode on SQLite, and in the batched mode on PostgreSQL
// too, as subtests "<mode>/<dialect>": a per-attempt attempt's deadlines and its way to its
// result are Temporal's whichever database holds the rows, a batched one's are statements of
// each dialect.
func eachModeOn(t *testing.T, test func(t *testing.T, dialect string, mode courier.DispatchMode)) {
	for _, m := range dispatchModes {
		for _, d := range testenv.Dialects {
			if d != "sqlite" && m == courier.DispatchPerAttempt {
				continue
			}
			t.Run(string(m)+"/"+d, func(t *testing.T) { test(t, d, m) })
		}
	}
}

// newTaskStackIn is newTaskStack whose queues are in mode.
func newTaskStackIn(t *testing.T, dialect string, mode courier.DispatchMode) *taskStack {
	ts := newTaskStack(t, dialect)
	ts.mode = mode
	return ts
}

// taskStack is a stack with a task-enabled worker and gateway.
type taskStack struct {
	*stack
	gw       string
	admin    string
	producer string
	worker   string
	svc      *tasks.Service
	w        *worker.Worker

	recoverAfter time.Duration
	tune         func(*worker.Config) // changes the workers' configuration; nil: none
	// mode is the dispatch mode putQueue gives a queue whose settings name none ("": the
	// default, per-attempt).
	mode courier.DispatchMode
	// metrics counts the workers' and the gateway's task pushes and results (nil: none).
	metrics *metrics.Tasks
	// resultAnswerDelay slows the gateway's writing of its answers to task results (in
	// nanoseconds; 0: none), as a loaded gateway is slow to write them.
	resultAnswerDelay atomic.Int64
}

func newTaskStack(t *testing.T, dialect string) *taskStack {
	return newTaskStackRecovering(t, dialect, 5*time.Second)
}

// newTaskStackRecovering sets how long a claimed attempt may wait for its push before a
// claimer starts it again.
func newTaskStackRecovering(t *testing.T, dialect string, recoverAfter time.Duration) *taskStack {
	return newTaskStackTuned(t, dialect, recoverAfter, nil)
}

// newTaskStackTuned lets tune change the workers' configuration before they start.
func newTaskStackTuned(t *testing.T, dialect string, recoverAfter time.Duration, tune func(*worker.Config)) *taskStack {
	t.Helper()
	return taskStackOn(t, newStack(t, dialect), recoverAfter, tune)
}

// taskStackOn adds a task worker, the task gateway and keys of each scope to a stack.
func taskStackOn(t *testing.T, s *stack, recoverAfter time.Duration, tune func(*worker.Config)) *taskStack {
	t.Helper()
	return taskStackWith(t, &taskStack{stack: s, recoverAfter: recoverAfter, tune: tune})
}

// taskStackWith adds a task worker, the task gateway and keys of each scope to ts's stack, as
// ts's fields say.
func taskStackWith(t *testing.T, ts *taskStack) *taskStack {
	t.Helper()
	ctx := t.Context()
	s := ts.stack
	// The gateway's address goes into every push, so it listens before the worker starts.
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if d := time.Duration(ts.resultAnswerDelay.Load()); d > 0 && strings.HasSuffix(r.URL.Path, "/result") {
			rw = &slowAnswer{ResponseWriter: rw, delay: d}
		}
		h.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	ts.gw = srv.URL
	ts.w = ts.startTaskWorker()
	ts.svc = tasks.NewService(s.store, s.tc, s.ts.GetDefaultNamespace(), ts.w.WakeTasks, ts.metrics, quiet)
	h = gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store, Tasks: ts.svc, Logger: quiet,
		Pauses: pauses.NewService(s.store, quiet)})
	for _, k := range []struct {
		dst   *string
		scope apikey.Scope
	}{{&ts.admin, apikey.ScopeAdmin}, {&ts.producer, apikey.ScopeProducer}, {&ts.worker, apikey.ScopeWorker}} {
		_, token, err := s.store.CreateAPIKey(ctx, "test-"+string(k.scope), []apikey.Scope{k.scope})
		require.NoError(t, err)
		*k.dst = token
	}
	return ts
}

// slowAnswer is a response writer that waits before it writes the status line, as a loaded
// gateway does; it passes flushes through (Unwrap).
type slowAnswer struct {
	http.ResponseWriter
	delay time.Duration
	once  sync.Once
}

func (w *slowAnswer) WriteHeader(code int) {
	w.once.Do(func() { time.Sleep(w.delay) })
	w.ResponseWriter.WriteHeader(code)
}

func (w *slowAnswer) Write(b []byte) (int, error) {
	w.once.Do(func() { time.Sleep(w.delay) })
	return w.ResponseWriter.Write(b)
}

func (w *slowAnswer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// startTaskWorker starts one more courier worker with a task claimer (every worker runs one).
func (ts *taskStack) startTaskWorker() *worker.Worker {
	t := ts.t
	cfg := worker.Config{
		Relay:                  relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry},
		DisableRelay:           true,
		Namespace:              ts.ts.GetDefaultNamespace(),
		AllowLoopbackCallbacks: true,
		ShutdownTimeout:        2 * time.Second,
		Tasks: tasks.Config{
			PollInterval: 200 * time.Millisecond,
			RecoverAfter: ts.recoverAfter,
			PublicURL:    ts.gw,
			SweepEvery:   time.Hour,
		},
	}
	if ts.tune != nil {
		ts.tune(&cfg)
	}
	w, err := worker.New(cfg, worker.Deps{Temporal: ts.tc, Publisher: ts.pub, Logger: quiet, Tasks: ts.store, TaskMetrics: ts.metrics,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: ts.store}}, Pauses: ts.paused})
	require.NoError(t, err)
	require.NoError(t, w.Start(ts.t.Context()))
	t.Cleanup(w.Stop)
	return w
}

// call sends one JSON request to the gateway and decodes the answer into out (if not nil).
func (ts *taskStack) call(method, path, token string, body any, out any) int {
	ts.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(ts.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, ts.gw+path, rd)
	require.NoError(ts.t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(ts.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(ts.t, err)
	if out != nil {
		require.NoError(ts.t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

// report posts a worker's result the way a real worker does: to the push's result URL.
func report(t *testing.T, token string, p api.TaskPush, status string, code int, msg string) int {
	body, _ := json.Marshal(map[string]any{"attempt": p.Attempt, "status": status, "status_code": code, "message": msg,
		"result": map[string]any{"task": p.TaskID, "attempt": p.Attempt}})
	return post(t, token, p.ResultURL, body)
}

func heartbeat(t *testing.T, token string, p api.TaskPush) int {
	body, _ := json.Marshal(map[string]any{"attempt": p.Attempt})
	return post(t, token, p.HeartbeatURL, body)
}

func post(t *testing.T, token, url string, body []byte) int {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0 // the test is ending
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// putQueue creates or replaces a queue, in the stack's dispatch mode unless q names one.
func (ts *taskStack) putQueue(name string, q map[string]any) {
	ts.t.Helper()
	if _, ok := q["dispatch_mode"]; !ok && ts.mode != "" {
		q = withQueue(q, map[string]any{"dispatch_mode": ts.mode})
	}
	code := ts.call(http.MethodPut, "/v1/queues/"+name, ts.admin, q, nil)
	require.Contains(ts.t, []int{http.StatusOK, http.StatusCreated}, code)
}

func (ts *taskStack) insert(id string, version int64, prio int, queue string) int {
	ts.t.Helper()
	return ts.call(http.MethodPost, "/v1/tasks", ts.producer, map[string]any{
		"task_id": id, "task_version": version, "priority": prio, "queue": queue, "payload": map[string]any{"file": id + ".pdf"}}, nil)
}

func (ts *taskStack) get(id string, version int64) api.Task {
	ts.t.Helper()
	var out api.Task
	require.Equal(ts.t, http.StatusOK, ts.call(http.MethodGet, fmt.Sprintf("/v1/tasks/%s/versions/%d", id, version), ts.producer, nil, &out))
	return out
}

func (ts *taskStack) waitStatus(id string, version int64, status courier.TaskStatus, within time.Duration) api.Task {
	ts.t.Helper()
	var last api.Task
	require.Eventually(ts.t, func() bool {
		last = ts.get(id, version)
		return last.Status == status
	}, within, 50*time.Millisecond, "task %s/%d never became %s", id, version, status)
	return last
}

// inFlight is the queue's count of tasks in Processing once the answers already written have
// settled: a result's slot stays counted until its worker has been answered (a hold, released
// tasks.AnswerSettle after the answer), so a read right after a 202 waits for those holds to go.
func (ts *taskStack) inFlight(queue string) int {
	ctx := ts.t.Context()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var holds int
		require.NoError(ts.t, ts.store.DB().NewRaw(
			"SELECT count(*) FROM courier_task_slot_holds WHERE queue = ?", queue).Scan(ctx, &holds))
		if holds == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	q, err := ts.store.GetQueue(ctx, queue)
	require.NoError(ts.t, err)
	return q.InFlight
}

// TestTasksLimitAndWeightedOrder: 2,000 tasks over all priorities into a queue with limit 20 and
// a slow worker, claimed by two courier workers at once. The task worker never holds more than
// 20, every task succeeds, and while every band has a backlog the pushes follow the weights.
func TestTasksLimitAndWeightedOrder(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			eachModeSlow(t, d, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				ts.startTaskWorker() // a second claimer competing for the same slots
				token := ts.worker
				// The first pushes are held until the limit's worth is in flight at once (or 5 s
				// have passed), so whether the limit is used does not depend on how fast a loaded
				// machine starts the first runs.
				full := make(chan struct{})
				var fullOnce sync.Once
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					if w.maxConcurrent() >= 20 {
						fullOnce.Do(func() { close(full) })
					}
					select {
					case <-full:
					case <-time.After(5 * time.Second):
					}
					time.Sleep(20 * time.Millisecond) // parsing
					if code := report(t, token, p, "success", 200, "parsed"); code != http.StatusAccepted {
						t.Errorf("result for %s: %d", p.TaskID, code)
					}
				})
				// The backlog is in place before the queue has a worker, so dispatch starts with
				// every band full.
				ts.putQueue("parse", map[string]any{"concurrency_limit": 20})
				const perBand = 400
				for i := 0; i < perBand; i++ {
					for p := 1; p <= 5; p++ {
						require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("doc-%d-%d", p, i), 1, p, "parse"))
					}
				}
				ts.putQueue("parse", map[string]any{"concurrency_limit": 20, "push_url": w.url})
				require.Eventually(t, func() bool {
					st, err := ts.store.TaskStats(t.Context())
					require.NoError(t, err)
					return st.ByQueueStatus["parse"][courier.TaskSuccess] == 5*perBand
				}, 5*time.Minute, 250*time.Millisecond, "every task succeeds")

				require.LessOrEqual(t, w.maxConcurrent(), 20, "the worker never holds more than the limit")
				require.GreaterOrEqual(t, w.maxConcurrent(), 10, "the limit is actually used")
				require.EqualValues(t, 5*perBand, w.pushes.Load(), "one push per task: nothing retried or duplicated")
				require.Equal(t, 0, ts.inFlight("parse"), "every slot released")

				// Band 1 (35 %) runs out first, after about 400/0.35 ≈ 1,140 claims: the first
				// 1,000 were made with every band backlogged. The order is the claims' (each
				// task's claimed_at; one claim's tasks share it), as the pushes' order also holds
				// how long each run took to start.
				type claimed struct {
					prio, n int
					at      time.Time
				}
				var order []claimed
				for prio := 1; prio <= 5; prio++ {
					for i := 0; i < perBand; i++ {
						task, err := ts.store.GetTask(t.Context(), fmt.Sprintf("doc-%d-%d", prio, i), 1)
						require.NoError(t, err)
						require.NotNil(t, task.ClaimedAt)
						order = append(order, claimed{prio: prio, n: i, at: *task.ClaimedAt})
					}
				}
				sort.SliceStable(order, func(i, j int) bool { return order[i].at.Before(order[j].at) })
				var counts [5]int
				for _, c := range order[:1000] {
					counts[c.prio-1]++
				}
				for i, want := range courier.DefaultBandWeights {
					share := float64(counts[i]) / 1000 * 100
					t.Logf("priority %d: %.1f%% (weight %d%%)", i+1, share, want)
					require.LessOrEqual(t, math.Abs(share-float64(want)), 5.0, "priority %d share", i+1)
				}
				// Within a band, the oldest first.
				var lastBand1 int
				for _, c := range order[:200] {
					if c.prio == 1 {
						require.GreaterOrEqual(t, c.n, lastBand1-20, "band 1 goes roughly oldest first")
						lastBand1 = max(lastBand1, c.n)
					}
				}
			})
		})
	}
}

// TestTasksLimitAsTheWorkerCountsIt: a worker that takes each push at once, works 50 ms, then
// reports and counts the task as held until its report's 202 comes back never holds more than
// the queue's limit, with claimers in two processes (issue 35: the slot a result frees was
// handed out before the answer was written, and the worker held 7 of a limit of 5). The
// gateway's answers to results are slowed by 100 ms, as under load: a slot handed out before
// its answer is written then reaches the worker as a push before the answer, every time.
func TestTasksLimitAsTheWorkerCountsIt(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				ts.startTaskWorker() // a second process's claimer
				ts.resultAnswerDelay.Store(int64(100 * time.Millisecond))
				token := ts.worker
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					time.Sleep(50 * time.Millisecond) // the work
					if code := report(t, token, p, "success", 200, "done"); code != http.StatusAccepted {
						t.Errorf("result for %s: %d", p.TaskID, code)
					}
				}) // held from the push until report has its answer
				const n, limit = 400, 5
				ts.putQueue("counted", map[string]any{"concurrency_limit": limit})
				for i := range n {
					require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("c-%d", i), 1, 1+i%5, "counted"))
				}
				ts.putQueue("counted", map[string]any{"concurrency_limit": limit, "push_url": w.url})
				require.Eventually(t, func() bool {
					st, err := ts.store.TaskStats(t.Context())
					require.NoError(t, err)
					return st.ByQueueStatus["counted"][courier.TaskSuccess] == n
				}, 5*time.Minute, 100*time.Millisecond, "every task succeeds")
				t.Logf("%s: the worker held at most %d of a limit of %d over %d pushes", d, w.maxConcurrent(), limit, w.pushes.Load())
				require.LessOrEqual(t, w.maxConcurrent(), limit, "the worker never holds more than the limit")
				require.Equal(t, limit, w.maxConcurrent(), "the limit is used")
				require.EqualValues(t, n, w.pushes.Load(), "one push per task")
				require.Eventually(t, func() bool { return ts.inFlight("counted") == 0 }, 10*time.Second, 50*time.Millisecond,
					"every slot released once its answer went out")
			})
		})
	}
}

// TestTasksConcurrentIdenticalInserts: 100 identical inserts at once create one task and one push.
func TestTasksConcurrentIdenticalInserts(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			token := ts.worker
			w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
				time.Sleep(300 * time.Millisecond) // parsing: long enough for all 100 inserts to land meanwhile
				report(t, token, p, "success", 200, "ok")
			})
			ts.putQueue("default", map[string]any{"push_url": w.url})
			var created, existing atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 100; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					switch ts.insert("same-doc", 1, 2, "default") {
					case http.StatusCreated:
						created.Add(1)
					case http.StatusOK:
						existing.Add(1)
					default:
						t.Error("unexpected status")
					}
				}()
			}
			wg.Wait()
			require.EqualValues(t, 1, created.Load())
			require.EqualValues(t, 99, existing.Load())
			done := ts.waitStatus("same-doc", 1, courier.TaskSuccess, time.Minute)
			// Only a run of the task's workflow pushes, and only a claim of a pending row (a new
			// attempt) or a restart of a processing one starts a run: once the row is final and
			// the latest run has closed, every push there will ever be has been made.
			id := courier.TaskWorkflowID("same-doc", 1)
			require.Eventually(t, func() bool {
				d, err := ts.tc.DescribeWorkflowExecution(t.Context(), id, "")
				return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			}, time.Minute, 20*time.Millisecond, "the task's run never closed")
			require.EqualValues(t, 1, w.pushes.Load(), "one dispatch")
			require.Equal(t, 1, done.Attempt, "one attempt: the task was never claimed again")
		})
	}
}

// TestTasksKilledWorker: a worker that dies mid-task never reports; its tasks time out, are
// retried on a live worker, and finish; no slot leaks, and the dead attempt's late result is
// refused.
func TestTasksKilledWorker(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				token := ts.worker
				var dead atomic.Bool
				dead.Store(true)
				var lost sync.Map // task id → the push the dead worker dropped
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					if dead.Load() {
						lost.Store(p.TaskID, p)
						return // killed mid-task: no result, no heartbeat
					}
					report(t, token, p, "success", 200, "ok")
				})
				ts.putQueue("default", map[string]any{"push_url": w.url, "concurrency_limit": 3, "processing_timeout": "2s",
					"retry": map[string]any{"initial_interval": "1s", "max_attempts": 5}})
				for i := 0; i < 5; i++ {
					require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("k%d", i), 1, 3, "default"))
				}
				// The handler runs after the push was answered: wait until the dead worker has
				// dropped three, not only been pushed them.
				require.Eventually(t, func() bool {
					n := 0
					lost.Range(func(_, _ any) bool { n++; return true })
					return n >= 3
				}, 30*time.Second, 20*time.Millisecond)
				require.LessOrEqual(t, ts.inFlight("default"), 3)
				dead.Store(false) // a new worker takes over behind the same URL

				for i := 0; i < 5; i++ {
					got := ts.waitStatus(fmt.Sprintf("k%d", i), 1, courier.TaskSuccess, time.Minute)
					require.GreaterOrEqual(t, got.Attempt, 1)
				}
				require.Equal(t, 0, ts.inFlight("default"), "no slot leaked")
				repairs, err := ts.store.ReconcileLimiters(t.Context())
				require.NoError(t, err)
				require.Empty(t, repairs, "the count matched the rows all along")

				n := 0
				lost.Range(func(_, v any) bool {
					p := v.(api.TaskPush)
					got := ts.get(p.TaskID, 1)
					require.Greater(t, got.Attempt, p.Attempt, "the lost attempt was retried")
					require.Equal(t, http.StatusConflict, report(t, token, p, "failure", 500, "late"), "a stale attempt's result is refused")
					require.Equal(t, http.StatusConflict, heartbeat(t, token, p))
					require.Equal(t, courier.TaskSuccess, ts.get(p.TaskID, 1).Status, "and changes nothing")
					n++
					return true
				})
				require.GreaterOrEqual(t, n, 3)
			})
		})
	}
}

// TestTasksHeartbeatFailureCancel: heartbeats keep a long attempt alive past the heartbeat
// timeout; a silent one fails by it; a failure with attempts left is retried and then fails
// for good; cancel works while pending and while processing.
func TestTasksHeartbeatFailureCancel(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		token := ts.worker
		release := make(chan struct{})
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
			switch {
			case p.TaskID == "long":
				for i := 0; i < 10; i++ { // 3 s of work, heartbeat timeout 1 s
					time.Sleep(300 * time.Millisecond) // work between heartbeats
					if code := heartbeat(t, token, p); code != http.StatusOK {
						t.Errorf("heartbeat %d: %d", i, code)
					}
				}
				report(t, token, p, "success", 200, "long done")
			case p.TaskID == "silent":
				// Never heartbeats: the attempt fails by the heartbeat timeout.
			case p.TaskID == "bad":
				report(t, token, p, "failure", 422, "not a PDF")
			case p.TaskID == "hold":
				<-release
			}
		})
		ts.putQueue("default", map[string]any{"push_url": w.url, "heartbeat_timeout": "1s", "processing_timeout": "1m",
			"retry": map[string]any{"initial_interval": "1s", "max_attempts": 2}})

		require.Equal(t, http.StatusCreated, ts.insert("long", 1, 1, "default"))
		got := ts.waitStatus("long", 1, courier.TaskSuccess, time.Minute)
		require.Equal(t, 1, got.Attempt, "kept alive by heartbeats: one attempt")
		require.Equal(t, "long done", got.Message)
		require.JSONEq(t, `{"task":"long","attempt":1}`, string(got.Result))

		require.Equal(t, http.StatusCreated, ts.insert("silent", 1, 1, "default"))
		got = ts.waitStatus("silent", 1, courier.TaskFailed, time.Minute)
		require.Equal(t, 2, got.Attempts, "retried once, then failed")
		require.Contains(t, got.Message, "heartbeat timeout")

		require.Equal(t, http.StatusCreated, ts.insert("bad", 1, 1, "default"))
		got = ts.waitStatus("bad", 1, courier.TaskFailed, time.Minute)
		require.Equal(t, 2, got.Attempts)
		require.Equal(t, 422, got.StatusCode)
		require.Equal(t, "not a PDF", got.Message)

		// Cancel while processing: the slot is free at once and the late result is refused.
		require.Equal(t, http.StatusCreated, ts.insert("hold", 1, 1, "default"))
		ts.waitStatus("hold", 1, courier.TaskProcessing, time.Minute)
		require.Eventually(t, func() bool { return ts.get("hold", 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)
		var cancelled api.Task
		require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/hold/versions/1", ts.producer, nil, &cancelled))
		require.Equal(t, courier.TaskCancelled, cancelled.Status)
		require.Equal(t, 0, ts.inFlight("default"))
		hold := w.pushOrder()[len(w.pushOrder())-1]
		require.Equal(t, "hold", hold.TaskID)
		require.Equal(t, http.StatusConflict, report(t, token, hold, "success", 200, "too late"))
		close(release)
		require.Equal(t, courier.TaskCancelled, ts.get("hold", 1).Status)
		var e api.ErrorBody
		require.Equal(t, http.StatusConflict, ts.call(http.MethodDelete, "/v1/tasks/long/versions/1", ts.producer, nil, &e), "a success cannot be cancelled")
		require.Equal(t, courier.CodeConflict, e.Error.Code)

		// Cancel while pending (the queue has no worker).
		ts.putQueue("idle", map[string]any{})
		require.Equal(t, http.StatusCreated, ts.insert("waiting", 1, 5, "idle"))
		require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/waiting/versions/1", ts.producer, nil, &cancelled))
		require.Equal(t, courier.TaskCancelled, cancelled.Status)

		// Version rules through the API: stale → 409 with the current version; a newer version
		// supersedes a pending older one; the latest version is what GET /v1/tasks/{id} shows.
		require.Equal(t, http.StatusCreated, ts.insert("v", 2, 3, "idle"))
		require.Equal(t, http.StatusCreated, ts.insert("v", 3, 3, "idle"))
		var conflict api.ErrorBody
		require.Equal(t, http.StatusConflict, ts.call(http.MethodPost, "/v1/tasks", ts.producer,
			map[string]any{"task_id": "v", "task_version": 1, "queue": "idle"}, &conflict))
		require.EqualValues(t, 3, conflict.Error.Details["current_version"])
		require.Equal(t, courier.TaskSuperseded, ts.get("v", 2).Status)
		var latest api.Task
		require.Equal(t, http.StatusOK, ts.call(http.MethodGet, "/v1/tasks/v", ts.producer, nil, &latest))
		require.EqualValues(t, 3, latest.TaskVersion)
	})
}

// TestTaskSweeper: the worker starts the sweeper, one workflow of its own kind that sweeps
// every interval (no schedule leaving a run a minute behind); a sweep repairs a limiter count
// that drifted from the rows, fails a task past its pending timeout, and finishes an attempt
// whose workflow an operator terminated (Temporal would never time it out).
func TestTaskSweeper(t *testing.T) {
	ts := newTaskStack(t, "sqlite")
	ctx := t.Context()
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {}) // never answers
	ts.putQueue("default", map[string]any{"push_url": w.url, "retry": map[string]any{"max_attempts": 1}})
	require.Equal(t, http.StatusCreated, ts.insert("orphan", 1, 3, "default"))
	require.Eventually(t, func() bool { return ts.get("orphan", 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)
	require.NoError(t, ts.tc.TerminateWorkflow(ctx, courier.TaskWorkflowID("orphan", 1), "", "operator mistake"))
	// As if the processing timeout and the grace had passed.
	_, err := ts.store.DB().NewRaw("UPDATE courier_tasks SET deadline_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'orphan'").Exec(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, ts.inFlight("default"))

	ts.putQueue("idle", map[string]any{})
	require.Equal(t, http.StatusCreated, ts.insert("expiring", 1, 3, "idle"))
	// As if its pending timeout had passed, and as if the slot count had drifted.
	_, err = ts.store.DB().NewRaw("UPDATE courier_tasks SET expires_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'expiring'").Exec(ctx)
	require.NoError(t, err)
	_, err = ts.store.DB().NewRaw("UPDATE courier_task_queues SET in_flight = 7 WHERE name = 'idle'").Exec(ctx)
	require.NoError(t, err)

	d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskSweeperID, "")
	require.NoError(t, err, "the worker started the sweeper")
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())
	_, err = ts.tc.ScheduleClient().GetHandle(ctx, courier.TaskSweeperID).Describe(ctx)
	require.Error(t, err, "no schedule starts a run a minute")
	// Another interval replaces the running sweeper, whose first sweep comes at once.
	require.NoError(t, tasks.EnsureSweeper(ctx, ts.tc, relay.DefaultTaskQueue, 200*time.Millisecond))
	require.NoError(t, tasks.EnsureSweeper(ctx, ts.tc, relay.DefaultTaskQueue, 200*time.Millisecond), "idempotent")
	require.Eventually(t, func() bool { return ts.inFlight("idle") == 0 }, time.Minute, 100*time.Millisecond, "limiter repaired")
	ts.waitStatus("expiring", 1, courier.TaskFailed, time.Minute)
	require.Contains(t, ts.get("expiring", 1).Message, "pending timeout")
	orphan := ts.waitStatus("orphan", 1, courier.TaskFailed, time.Minute)
	require.Contains(t, orphan.Message, "workflow ended")
	require.Equal(t, 0, ts.inFlight("default"), "the orphan's slot is free again")
	resp, err := ts.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ts.ts.GetDefaultNamespace(),
		Query: courier.KindTaskSweeper.Query() + " AND ExecutionStatus = 'Running'"})
	require.NoError(t, err)
	require.EqualValues(t, 1, resp.GetCount(), "one sweeper runs, sweeping every interval")
}

// TestTasksResubmitWhileOldRunOpen: a task cancelled in the database whose attempt's workflow
// is still open (the workflow cancel failed) is re-submitted: the new attempt does not wait
// behind the old run, and the old attempt's late result is refused.
func TestTasksResubmitWhileOldRunOpen(t *testing.T) {
	ts := newTaskStackRecovering(t, "sqlite", time.Hour) // the fresh claim alone must cope
	ctx := t.Context()
	token := ts.worker
	var first sync.Map
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
		if p.Attempt == 1 {
			first.Store(p.TaskID, p) // holds it: no result
			return
		}
		report(t, token, p, "success", 200, "second life")
	})
	ts.putQueue("default", map[string]any{"push_url": w.url, "processing_timeout": "10m"})
	require.Equal(t, http.StatusCreated, ts.insert("again", 1, 3, "default"))
	require.Eventually(t, func() bool { return ts.get("again", 1).PushedAt != nil }, time.Minute, 20*time.Millisecond)
	// Cancel the row only, as if the workflow cancel had failed: the attempt's run stays open.
	_, _, err := ts.store.CancelTask(ctx, "again", 1)
	require.NoError(t, err)
	d, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID("again", 1), "")
	require.NoError(t, err)
	oldRun := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()

	require.Equal(t, http.StatusOK, ts.call(http.MethodPost, "/v1/tasks", ts.producer, map[string]any{
		"task_id": "again", "task_version": 1, "payload": map[string]any{"life": 2}}, nil))
	got := ts.waitStatus("again", 1, courier.TaskSuccess, 30*time.Second)
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, "second life", got.Message)

	old, err := ts.tc.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID("again", 1), oldRun)
	require.NoError(t, err)
	require.NotEqual(t, "WORKFLOW_EXECUTION_STATUS_RUNNING", old.GetWorkflowExecutionInfo().GetStatus().String(), "the old run was ended")
	p, ok := first.Load("again")
	require.True(t, ok)
	require.Equal(t, http.StatusConflict, report(t, token, p.(api.TaskPush), "failure", 500, "late"))
	require.Equal(t, courier.TaskSuccess, ts.get("again", 1).Status)
	require.Equal(t, 0, ts.inFlight("default"))
}

// TestTasksClaimedButNeverStarted: a claimer that dies between its claim and the workflow start
// leaves a task in Processing without a push; another claimer starts it after RecoverAfter.
func TestTasksClaimedButNeverStarted(t *testing.T) {
	ts := newTaskStack(t, "sqlite") // RecoverAfter 5 s
	ctx := t.Context()
	token := ts.worker
	w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) { report(t, token, p, "success", 200, "ok") })
	ts.putQueue("lost", map[string]any{}) // no push_url yet: the worker's claimer leaves it alone
	require.Equal(t, http.StatusCreated, ts.insert("orphaned-claim", 1, 3, "lost"))
	// A claim as the store runs it, by a claimer that then dies before starting the attempt (the
	// rules would not claim for a queue without a push URL; the live claimer must not take it).
	var claimed []courier.Task
	err := ts.store.RunClaim(ctx, "lost", func(ctx context.Context, tx dispatch.ClaimTx) error {
		var err error
		if claimed, err = tx.ClaimBand(ctx, 3, 10, ""); err != nil {
			return err
		}
		return tx.AddInFlight(ctx, len(claimed))
	})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	ts.putQueue("lost", map[string]any{"push_url": w.url})

	got := ts.waitStatus("orphaned-claim", 1, courier.TaskSuccess, time.Minute)
	require.Equal(t, 1, got.Attempt, "the claimed attempt itself was started, not a new one")
	require.EqualValues(t, 1, w.pushes.Load())
	require.Equal(t, 0, ts.inFlight("lost"))
}
