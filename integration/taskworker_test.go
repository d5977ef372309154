package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

// reportLog counts the heartbeats and results a taskworker sent per task and what courier
// answered, by watching its client's transport.
type reportLog struct {
	mu  sync.Mutex
	got map[string][]int // "heartbeat task-id" / "result task-id" → statuses
	// batches holds, per POST /v1/tasks/results answered 200, how many results it carried.
	batches  []int
	accepted int // results answered 202 in them
}

func (l *reportLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/tasks/results" {
		return l.results(r)
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	// /v1/tasks/{id}/versions/{v}/{kind}
	parts := strings.Split(r.URL.Path, "/")
	if err == nil && len(parts) == 7 {
		l.mu.Lock()
		k := parts[6] + " " + parts[3]
		l.got[k] = append(l.got[k], resp.StatusCode)
		l.mu.Unlock()
	}
	return resp, err
}

// results sends a POST /v1/tasks/results and records how many results it carried.
func (l *reportLog) results(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req api.TaskResults
	_ = json.Unmarshal(body, &req)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	var ans api.TaskResultsAnswer
	_ = json.Unmarshal(raw, &ans)
	accepted := 0
	for _, a := range ans.Results {
		if a.Status == http.StatusAccepted {
			accepted++
		}
	}
	l.mu.Lock()
	l.batches = append(l.batches, len(req.Results))
	l.accepted += accepted
	l.mu.Unlock()
	return resp, nil
}

// acceptedResults is how many results courier accepted (202) in POST /v1/tasks/results.
func (l *reportLog) acceptedResults() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

// resultBatches are the sizes of the POST /v1/tasks/results courier answered.
func (l *reportLog) resultBatches() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.batches...)
}

func (l *reportLog) count(kind, taskID string, status int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.got[kind+" "+taskID] {
		if status == 0 || s == status {
			n++
		}
	}
	return n
}

// twRig is a taskworker.Worker serving a queue of a real courier (gateway, worker, Temporal).
type twRig struct {
	ts      *taskStack
	w       *taskworker.Worker
	log     *reportLog
	answers *answerLog
	url     string
}

// answerLog counts the Worker's answers to pushes by status.
type answerLog struct {
	mu      sync.Mutex
	n       map[int]int
	refused int // attempts refused in the answers to batched pushes
}

func (a *answerLog) refusals() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused
}

func (a *answerLog) of(status int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[status]
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func newTWRig(t *testing.T, ts *taskStack, secrets []string, maxConcurrent int, h taskworker.HandlerFunc) *twRig {
	return newTWRigTuned(t, ts, secrets, maxConcurrent, h, nil)
}

// newTWRigTuned lets tune change the Worker's configuration.
func newTWRigTuned(t *testing.T, ts *taskStack, secrets []string, maxConcurrent int, h taskworker.HandlerFunc, tune func(*taskworker.Config)) *twRig {
	t.Helper()
	log := &reportLog{got: map[string][]int{}}
	c, err := cc.New(ts.gw, cc.WithAPIKey(ts.worker), cc.WithHTTPClient(&http.Client{Transport: log, Timeout: 30 * time.Second}))
	require.NoError(t, err)
	cfg := taskworker.Config{Client: c, Secrets: secrets, AllowUnsigned: len(secrets) == 0,
		MaxConcurrent: maxConcurrent, RetryAfter: time.Second, Logger: quiet}
	if tune != nil {
		tune(&cfg)
	}
	w, err := taskworker.New(cfg, h)
	require.NoError(t, err)
	r := &twRig{ts: ts, w: w, log: log, answers: &answerLog{n: map[int]int{}}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		cnt := &refusalCounter{ResponseWriter: rw}
		rec := &statusRecorder{ResponseWriter: cnt}
		w.ServeHTTP(rec, req)
		var ans api.TaskPushBatchAnswer
		_ = json.Unmarshal(cnt.body.Bytes(), &ans)
		r.answers.mu.Lock()
		r.answers.n[rec.status]++
		r.answers.refused += len(ans.Refused)
		r.answers.mu.Unlock()
	}))
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	r.url = srv.URL + "/push"
	return r
}

// refusalCounter counts the attempts the Worker refused in its answers to batched pushes.
type refusalCounter struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (c *refusalCounter) Write(b []byte) (int, error) {
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// mode is what a test task asks the handler to do.
type mode struct {
	Mode string `json:"mode"`
}

// The task-worker library against a real courier: success with the handler's result; an error
// retried and then failed; a panic reported as a failure while the server goes on; the
// handler's context ending at the attempt's deadline; heartbeats keeping an attempt alive far
// past its heartbeat timeout; a 409 on a heartbeat (the task was cancelled) ending the work with
// no result; pushes signed with one secret of a rotation.
func TestTaskWorkerLibrary(t *testing.T) {
	ts := newTaskStack(t, "sqlite")
	ctx := t.Context()
	oldSecret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	newSecret, err := webhook.GenerateSecret()
	require.NoError(t, err)

	var (
		calls   sync.Map // task id → *atomic.Int32: handler calls
		causes  sync.Map // task id → error: why the handler's context ended
		started = make(chan string, 16)
		rig     *twRig
	)
	rig = newTWRig(t, ts, []string{newSecret, oldSecret}, 0, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		n, _ := calls.LoadOrStore(task.ID, new(atomic.Int32))
		attempt := n.(*atomic.Int32).Add(1)
		if got, ok := taskworker.FromContext(ctx); !ok || got != task {
			return nil, errors.New("the context does not carry the task")
		}
		var m mode
		if err := json.Unmarshal(task.Payload, &m); err != nil {
			return nil, taskworker.Fail(422, err)
		}
		started <- task.ID
		switch m.Mode {
		case "ok":
			task.SetMessage("done")
			return json.RawMessage(fmt.Sprintf(`{"echo":%q,"attempt":%d}`, task.ID, task.Attempt)), nil
		case "error":
			return nil, fmt.Errorf("no luck (call %d)", attempt)
		case "panic":
			panic("the parser fell over")
		case "heartbeats":
			// Work until courier has accepted four heartbeats: at a third of the heartbeat
			// timeout each, the attempt then runs past its heartbeat timeout.
			for rig.log.count("heartbeat", task.ID, http.StatusOK) < 4 {
				select {
				case <-ctx.Done():
					causes.Store(task.ID, context.Cause(ctx))
					return nil, ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			return json.RawMessage(`"kept alive"`), nil
		case "wait":
			<-ctx.Done()
			causes.Store(task.ID, context.Cause(ctx))
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("unknown mode %q", m.Mode)
	})
	// Courier signs with the new secret only; the worker, rolled out first, knows both.
	admin, err := cc.New(ts.gw, cc.WithAPIKey(ts.admin))
	require.NoError(t, err)
	producer, err := cc.New(ts.gw, cc.WithAPIKey(ts.producer))
	require.NoError(t, err)
	_, err = admin.PutQueue(ctx, "tw", cc.QueueConfig{PushURL: rig.url, Secrets: []string{newSecret}, ConcurrencyLimit: 10,
		ProcessingTimeout: cc.PositiveDuration(30 * time.Second), HeartbeatTimeout: cc.Duration(time.Second),
		Retry: cc.Retry{InitialInterval: cc.PositiveDuration(time.Second), MaxAttempts: 2}})
	require.NoError(t, err)

	insert := func(id, m string, o cc.TaskOverrides) {
		_, err := producer.InsertTask(ctx, cc.TaskRequest{TaskID: id, TaskVersion: 1, Queue: "tw",
			Payload: json.RawMessage(`{"mode":"` + m + `"}`), Overrides: o})
		require.NoError(t, err)
	}
	final := func(id string) *cc.Task {
		var task *cc.Task
		waitFor(t, id+" finishes", func() bool {
			var err error
			task, err = producer.GetTask(ctx, id)
			require.NoError(t, err)
			switch task.Status {
			case courier.TaskSuccess, courier.TaskFailed, courier.TaskCancelled:
				return true
			}
			return false
		})
		return task
	}
	callsOf := func(id string) int32 {
		n, ok := calls.Load(id)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}
	causeOf := func(id string) error {
		var cause error
		waitFor(t, id+"'s context ends", func() bool {
			v, ok := causes.Load(id)
			if ok {
				cause = v.(error)
			}
			return ok
		})
		return cause
	}

	insert("tw-ok", "ok", cc.TaskOverrides{})
	insert("tw-error", "error", cc.TaskOverrides{})
	insert("tw-panic", "panic", cc.TaskOverrides{MaxAttempts: 1})
	insert("tw-deadline", "wait", cc.TaskOverrides{ProcessingTimeout: cc.PositiveDuration(2 * time.Second), MaxAttempts: 1})
	insert("tw-heartbeats", "heartbeats", cc.TaskOverrides{MaxAttempts: 1})
	insert("tw-cancel", "wait", cc.TaskOverrides{})

	t.Run("success", func(t *testing.T) {
		task := final("tw-ok")
		require.Equal(t, courier.TaskSuccess, task.Status, task.Message)
		require.JSONEq(t, `{"echo":"tw-ok","attempt":1}`, string(task.Result))
		require.Equal(t, "done", task.Message)
		require.Equal(t, 200, task.StatusCode)
		// courier stores the result before it answers the worker, so the answer may still be
		// on its way when the task already reads as a success.
		waitFor(t, "the worker sees its result accepted", func() bool {
			return rig.log.count("result", "tw-ok", 0) > 0
		})
		require.Equal(t, 1, rig.log.count("result", "tw-ok", http.StatusAccepted))
	})
	t.Run("error is a failure, retried per the queue", func(t *testing.T) {
		task := final("tw-error")
		require.Equal(t, courier.TaskFailed, task.Status)
		require.Equal(t, 2, task.Attempts)
		require.Equal(t, "no luck (call 2)", task.Message)
		require.Equal(t, 500, task.StatusCode)
		require.EqualValues(t, 2, callsOf("tw-error"))
	})
	t.Run("panic is a failure and the server survives", func(t *testing.T) {
		task := final("tw-panic")
		require.Equal(t, courier.TaskFailed, task.Status)
		require.Equal(t, "panic: the parser fell over", task.Message)
		insert("tw-after-panic", "ok", cc.TaskOverrides{})
		require.Equal(t, courier.TaskSuccess, final("tw-after-panic").Status)
	})
	t.Run("the context ends at the deadline", func(t *testing.T) {
		require.ErrorIs(t, causeOf("tw-deadline"), taskworker.ErrDeadline)
		task := final("tw-deadline")
		require.Equal(t, courier.TaskFailed, task.Status)
		require.Zero(t, rig.log.count("result", "tw-deadline", 0), "nothing is reported past the deadline")
		require.Positive(t, rig.log.count("heartbeat", "tw-deadline", http.StatusOK), "heartbeats until then")
	})
	t.Run("heartbeats keep a long attempt alive", func(t *testing.T) {
		task := final("tw-heartbeats")
		require.Equal(t, courier.TaskSuccess, task.Status, task.Message)
		require.Equal(t, 1, task.Attempts, "one attempt, alive past its 1 s heartbeat timeout")
		require.JSONEq(t, `"kept alive"`, string(task.Result))
		require.GreaterOrEqual(t, rig.log.count("heartbeat", "tw-heartbeats", http.StatusOK), 4)
	})
	t.Run("a 409 on a heartbeat stops the work", func(t *testing.T) {
		waitFor(t, "tw-cancel runs", func() bool { return callsOf("tw-cancel") == 1 })
		_, err := producer.CancelTask(ctx, "tw-cancel", 1)
		require.NoError(t, err)
		require.ErrorIs(t, causeOf("tw-cancel"), taskworker.ErrAttemptOver)
		require.Equal(t, 1, rig.log.count("heartbeat", "tw-cancel", http.StatusConflict))
		require.Equal(t, courier.TaskCancelled, final("tw-cancel").Status)
		waitFor(t, "the worker lets go", func() bool { return rig.w.Running() == 0 })
		require.Zero(t, rig.log.count("result", "tw-cancel", 0), "no result for a cancelled attempt")
	})
	require.Zero(t, rig.answers.of(http.StatusUnauthorized), "every push was signed with a secret the worker knows")
}

// MaxConcurrent: a push beyond it is answered 429 with Retry-After and courier pushes it
// again later; the handler never runs twice at once.
func TestTaskWorkerMaxConcurrent(t *testing.T) {
	ts := newTaskStack(t, "sqlite")
	ctx := t.Context()
	var running, most atomic.Int32
	release := make(chan struct{})
	rig := newTWRig(t, ts, nil, 1, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if task.ID == "mc-1" {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return json.RawMessage(`1`), nil
	})
	admin, err := cc.New(ts.gw, cc.WithAPIKey(ts.admin))
	require.NoError(t, err)
	producer, err := cc.New(ts.gw, cc.WithAPIKey(ts.producer))
	require.NoError(t, err)
	_, err = admin.PutQueue(ctx, "one", cc.QueueConfig{PushURL: rig.url, ConcurrencyLimit: 2,
		Retry: cc.Retry{InitialInterval: cc.PositiveDuration(time.Second), MaxAttempts: 5}})
	require.NoError(t, err)
	_, err = producer.InsertTask(ctx, cc.TaskRequest{TaskID: "mc-1", TaskVersion: 1, Queue: "one", Priority: 1})
	require.NoError(t, err)
	waitFor(t, "mc-1 runs", func() bool { return running.Load() == 1 })
	_, err = producer.InsertTask(ctx, cc.TaskRequest{TaskID: "mc-2", TaskVersion: 1, Queue: "one"})
	require.NoError(t, err)
	waitFor(t, "mc-2's push meets the limit", func() bool { return rig.answers.of(http.StatusTooManyRequests) >= 1 })
	close(release)
	for _, id := range []string{"mc-1", "mc-2"} {
		waitFor(t, id+" succeeds", func() bool {
			task, err := producer.GetTask(ctx, id)
			return err == nil && task.Status == courier.TaskSuccess
		})
	}
	require.EqualValues(t, 1, most.Load(), "never two handlers at once")
}

// The task-worker library on a queue in the batched dispatch mode with batched pushes: it
// verifies each signed batch, takes what fits its MaxConcurrent and refuses the rest one by one
// (courier ends each refused attempt and retries it per the queue), heartbeats each attempt
// past its heartbeat timeout, and reports the results in batches through POST
// /v1/tasks/results. Every task ends Success; the handler never runs more than MaxConcurrent
// at once; no result goes to a task's own result route.
func TestTaskWorkerBatched(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			ctx := t.Context()
			secret, err := webhook.GenerateSecret()
			require.NoError(t, err)
			const n, maxConcurrent = 40, 4
			gate := make(chan struct{})
			var running, most atomic.Int32
			var badTask atomic.Value
			rig := newTWRigTuned(t, ts, []string{secret}, maxConcurrent, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
				if task.ResultsURL == "" || task.DeliveryID != fmt.Sprintf("task/%s/%d/%d", task.ID, task.Version, task.Attempt) {
					badTask.Store(fmt.Sprintf("%s: results url %q, delivery id %q", task.ID, task.ResultsURL, task.DeliveryID))
				}
				k := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
				}
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				task.SetMessage("batched")
				return json.RawMessage(fmt.Sprintf(`{"task":%q}`, task.ID)), nil
			}, func(c *taskworker.Config) { c.ResultLinger = 200 * time.Millisecond })
			admin, err := cc.New(ts.gw, cc.WithAPIKey(ts.admin))
			require.NoError(t, err)
			producer, err := cc.New(ts.gw, cc.WithAPIKey(ts.producer))
			require.NoError(t, err)
			cfg := cc.QueueConfig{Secrets: []string{secret}, ConcurrencyLimit: 10,
				DispatchMode: courier.DispatchBatched, PushBatchSize: 10, HeartbeatTimeout: cc.Duration(time.Second),
				Retry: cc.Retry{InitialInterval: cc.PositiveDuration(time.Second), MaxAttempts: 30}}
			_, err = admin.PutQueue(ctx, "twb", cfg)
			require.NoError(t, err)
			for i := range n {
				_, err := producer.InsertTask(ctx, cc.TaskRequest{TaskID: fmt.Sprintf("twb-%d", i), TaskVersion: 1, Queue: "twb"})
				require.NoError(t, err)
			}
			cfg.PushURL = rig.url
			_, err = admin.PutQueue(ctx, "twb", cfg)
			require.NoError(t, err)

			// The worker holds MaxConcurrent attempts and refuses what the limit of 10 pushes
			// beyond them, while heartbeats keep the held ones alive past their 1 s timeout.
			waitFor(t, "attempts beyond MaxConcurrent are refused", func() bool { return rig.answers.refusals() > 0 })
			waitFor(t, "heartbeats keep the held attempts alive", func() bool {
				for i := range n {
					if rig.log.count("heartbeat", fmt.Sprintf("twb-%d", i), http.StatusOK) >= 4 {
						return true
					}
				}
				return false
			})
			close(gate)
			require.Eventually(t, func() bool {
				st, err := ts.store.TaskStats(ctx)
				require.NoError(t, err)
				return st.ByQueueStatus["twb"][courier.TaskSuccess] == n
			}, 2*time.Minute, 100*time.Millisecond, "every task succeeds")

			require.Nil(t, badTask.Load(), "each task carries its delivery id and the results url")
			require.LessOrEqual(t, int(most.Load()), maxConcurrent, "never more handlers than MaxConcurrent")
			retried := 0
			for i := range n {
				id := fmt.Sprintf("twb-%d", i)
				task := ts.get(id, 1)
				require.JSONEq(t, fmt.Sprintf(`{"task":%q}`, id), string(task.Result))
				require.Equal(t, "batched", task.Message)
				if task.Attempts > 1 {
					retried++
				}
				require.Zero(t, rig.log.count("result", id, 0), "no result through the task's own route")
			}
			require.Positive(t, retried, "refused attempts came back and succeeded")
			batches := rig.log.resultBatches()
			biggest := 0
			for _, b := range batches {
				biggest = max(biggest, b)
			}
			require.Equal(t, n, rig.log.acceptedResults(), "one accepted result per task, all through POST /v1/tasks/results")
			require.Greater(t, biggest, 1, "results share requests")
			require.Zero(t, rig.answers.of(http.StatusUnauthorized), "every batched push verified")
			require.Eventually(t, func() bool { return ts.inFlight("twb") == 0 }, 10*time.Second, 50*time.Millisecond)
			t.Logf("%s: %d tasks, %d refused attempts, %d retried tasks, results in %d requests (largest %d), most handlers at once %d",
				d, n, rig.answers.refusals(), retried, len(batches), biggest, most.Load())
		})
	}
}
