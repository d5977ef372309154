package integration

import (
	"context"
	"encoding/json"
	"errors"
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
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

// reportLog counts the heartbeats and results a taskworker sent per task and what courier
// answered, by watching its client's transport.
type reportLog struct {
	mu  sync.Mutex
	got map[string][]int // "heartbeat task-id" / "result task-id" → statuses
}

func (l *reportLog) RoundTrip(r *http.Request) (*http.Response, error) {
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
	mu sync.Mutex
	n  map[int]int
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
	t.Helper()
	log := &reportLog{got: map[string][]int{}}
	c, err := cc.New(ts.gw, cc.WithAPIKey(ts.worker), cc.WithHTTPClient(&http.Client{Transport: log, Timeout: 30 * time.Second}))
	require.NoError(t, err)
	w, err := taskworker.New(taskworker.Config{Client: c, Secrets: secrets, AllowUnsigned: len(secrets) == 0,
		MaxConcurrent: maxConcurrent, RetryAfter: time.Second, Logger: quiet}, h)
	require.NoError(t, err)
	r := &twRig{ts: ts, w: w, log: log, answers: &answerLog{n: map[int]int{}}}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: rw}
		w.ServeHTTP(rec, req)
		r.answers.mu.Lock()
		r.answers.n[rec.status]++
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
