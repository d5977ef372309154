package taskworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

// These tests play courier's gateway with an httptest server; integration/taskworker_test.go
// runs the Worker against the real gateway, worker and Temporal.

const workerKey = "test-worker-key"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// report is one heartbeat or result the fake gateway received.
type report struct {
	Kind    string // "heartbeat" or "result"
	TaskID  string
	Version string
	Auth    string
	Attempt int
	Result  api.TaskResult
}

// fakeCourier records reports and answers them with answer(kind, n) (n from 1 per kind;
// nil: 200 for heartbeats, 202 for results).
type fakeCourier struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []report
	answer func(kind string, n int) int
	// batches are the requests to POST /v1/tasks/results, each a list of results; every result
	// is also recorded in got as a "result" report. answerItem answers the n-th result of a
	// task (nil: 202).
	batches    [][]api.TaskResultItem
	answerItem func(taskID string, n int) int
}

func newFakeCourier(t *testing.T) *fakeCourier {
	f := &fakeCourier{}
	mux := http.NewServeMux()
	for _, kind := range []string{"heartbeat", "result"} {
		mux.HandleFunc("POST /v1/tasks/{id}/versions/{v}/"+kind, func(w http.ResponseWriter, r *http.Request) {
			rep := report{Kind: kind, TaskID: r.PathValue("id"), Version: r.PathValue("v"), Auth: r.Header.Get("Authorization")}
			_ = json.NewDecoder(r.Body).Decode(&rep.Result)
			rep.Attempt = rep.Result.Attempt
			f.mu.Lock()
			f.got = append(f.got, rep)
			n := 0
			for _, g := range f.got {
				if g.Kind == kind {
					n++
				}
			}
			answer := f.answer
			f.mu.Unlock()
			code := map[string]int{"heartbeat": http.StatusOK, "result": http.StatusAccepted}[kind]
			if answer != nil {
				code = answer(kind, n)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			if code >= 300 {
				c := map[int]string{409: "conflict", 503: "unavailable"}[code]
				_, _ = io.WriteString(w, `{"error":{"code":"`+c+`","message":"attempt `+strconv.Itoa(rep.Attempt)+` is not running"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"accepted":true}`)
		})
	}
	mux.HandleFunc("POST /v1/tasks/results", func(w http.ResponseWriter, r *http.Request) {
		var req api.TaskResults
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Results) == 0 {
			http.Error(w, "bad results", http.StatusBadRequest)
			return
		}
		ans := api.TaskResultsAnswer{}
		f.mu.Lock()
		f.batches = append(f.batches, req.Results)
		for _, it := range req.Results {
			f.got = append(f.got, report{Kind: "result", TaskID: it.TaskID, Version: strconv.FormatInt(it.TaskVersion, 10),
				Auth: r.Header.Get("Authorization"), Attempt: it.Attempt, Result: it.TaskResult})
			n := 0
			for _, g := range f.got {
				if g.Kind == "result" && g.TaskID == it.TaskID {
					n++
				}
			}
			a := api.TaskResultAnswer{TaskID: it.TaskID, TaskVersion: it.TaskVersion, Attempt: it.Attempt, Status: http.StatusAccepted}
			if f.answerItem != nil {
				a.Status = f.answerItem(it.TaskID, n)
			}
			if a.Status != http.StatusAccepted {
				a.Error = &api.ErrorDetail{Code: map[int]courier.Code{409: courier.CodeConflict, 503: courier.CodeUnavailable}[a.Status], Message: "scripted"}
			}
			ans.Results = append(ans.Results, a)
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ans)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCourier) setAnswerItem(a func(taskID string, n int) int) {
	f.mu.Lock()
	f.answerItem = a
	f.mu.Unlock()
}

// resultBatches are the requests to POST /v1/tasks/results so far.
func (f *fakeCourier) resultBatches() [][]api.TaskResultItem {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]api.TaskResultItem(nil), f.batches...)
}

func (f *fakeCourier) reports(kind string) []report {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []report
	for _, g := range f.got {
		if g.Kind == kind {
			out = append(out, g)
		}
	}
	return out
}

func (f *fakeCourier) setAnswer(a func(kind string, n int) int) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

// rig is a Worker behind an httptest server, reporting to a fake gateway.
type rig struct {
	w       *taskworker.Worker
	srv     *httptest.Server
	courier *fakeCourier
	secret  string
}

func newRig(t *testing.T, h taskworker.HandlerFunc, tune func(*taskworker.Config)) *rig {
	t.Helper()
	f := newFakeCourier(t)
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	c, err := client.New(f.srv.URL, client.WithAPIKey(workerKey),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	require.NoError(t, err)
	cfg := taskworker.Config{Client: c, Secrets: []string{secret}, Logger: quiet}
	if tune != nil {
		tune(&cfg)
	}
	w, err := taskworker.New(cfg, h)
	require.NoError(t, err)
	r := &rig{w: w, courier: f, secret: secret}
	r.srv = httptest.NewServer(w)
	t.Cleanup(func() {
		r.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	return r
}

// pushOf builds a push; hb is a Go duration string, "" for none.
func pushOf(id string, attempt int, payload string, hb string, deadline time.Time) taskworker.Push {
	var heartbeat time.Duration
	if hb != "" {
		heartbeat, _ = time.ParseDuration(hb)
	}
	return taskworker.Push{TaskID: id, TaskVersion: 1, Attempt: attempt, Priority: 2, Queue: "q",
		Payload: json.RawMessage(payload), Deadline: deadline, HeartbeatTimeout: api.PositiveDuration(heartbeat),
		ResultURL: "http://courier.invalid/r", HeartbeatURL: "http://courier.invalid/h"}
}

func (r *rig) send(t *testing.T, body []byte, h http.Header) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+"/push", bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header, out
}

// push sends p signed with secret ("": the rig's).
func (r *rig) push(t *testing.T, p taskworker.Push, secret string) (int, http.Header, map[string]any) {
	t.Helper()
	body, err := json.Marshal(p)
	require.NoError(t, err)
	if secret == "" {
		secret = r.secret
	}
	s, err := webhook.NewSigner(secret)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, "task/"+p.TaskID+"/1/"+strconv.Itoa(p.Attempt), time.Now(), body))
	return r.send(t, body, h)
}

func (r *rig) waitReports(t *testing.T, kind string, n int) []report {
	t.Helper()
	require.Eventually(t, func() bool { return len(r.courier.reports(kind)) >= n }, 5*time.Second, 5*time.Millisecond,
		"want %d %s reports", n, kind)
	return r.courier.reports(kind)
}

func (r *rig) waitIdle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return r.w.Running() == 0 }, 5*time.Second, 5*time.Millisecond)
}

var soon = func() time.Time { return time.Now().Add(time.Minute) }

// A push is answered 202 before the handler finishes; the handler's context carries the task;
// the result goes to the task's route with the attempt and the worker key.
func TestSuccessIsReported(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		got, ok := taskworker.FromContext(ctx)
		if !ok || got != task {
			return nil, errors.New("the context does not carry the task")
		}
		<-release
		task.SetMessage("did " + string(task.Payload))
		return json.RawMessage(`{"ok":true}`), nil
	}, nil)
	code, _, out := r.push(t, pushOf("t-ok", 3, `"x"`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code, out)
	require.Equal(t, true, out["accepted"])
	require.Equal(t, 1, r.w.Running())
	close(release)
	rep := r.waitReports(t, "result", 1)[0]
	require.Equal(t, "Bearer "+workerKey, rep.Auth)
	require.Equal(t, "t-ok", rep.TaskID)
	require.Equal(t, "1", rep.Version)
	require.Equal(t, api.TaskResult{Attempt: 3, Status: courier.OutcomeSuccess, StatusCode: 200, Message: `did "x"`,
		Result: json.RawMessage(`{"ok":true}`)}, rep.Result)
	r.waitIdle(t)
}

// An error is a failure with its text; Fail sets the status code; a panic is a failure and the
// worker goes on serving.
func TestErrorsAndPanicsAreFailures(t *testing.T) {
	r := newRig(t, func(_ context.Context, task *taskworker.Task) (json.RawMessage, error) {
		switch string(task.Payload) {
		case `"error"`:
			return nil, errors.New("disk full")
		case `"fail"`:
			return nil, taskworker.Fail(422, errors.New("not a document"))
		case `"panic"`:
			panic("boom")
		case `"bad json"`:
			return json.RawMessage(`{`), nil
		}
		return nil, nil
	}, nil)
	for i, tc := range []struct {
		payload string
		code    int
		msg     string
	}{
		{`"error"`, 500, "disk full"},
		{`"fail"`, 422, "not a document"},
		{`"panic"`, 500, "panic: boom"},
		{`"bad json"`, 500, "the handler's result is not JSON"},
	} {
		id := "t-" + strconv.Itoa(i)
		code, _, _ := r.push(t, pushOf(id, 1, tc.payload, "", soon()), "")
		require.Equal(t, http.StatusAccepted, code)
		var rep report
		require.Eventually(t, func() bool {
			for _, g := range r.courier.reports("result") {
				if g.TaskID == id {
					rep = g
					return true
				}
			}
			return false
		}, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, courier.OutcomeFailure, rep.Result.Status, tc.payload)
		require.Equal(t, tc.code, rep.Result.StatusCode, tc.payload)
		require.Equal(t, tc.msg, rep.Result.Message, tc.payload)
	}
	code, _, _ := r.push(t, pushOf("t-after", 1, `"ok"`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code, "the worker survives a panic")
	r.waitReports(t, "result", 5)
}

// Pushes signed with any of the secrets pass (a rotation); unsigned, foreign, stale or altered
// ones are 401 and start nothing.
func TestSignatures(t *testing.T) {
	old, err := webhook.GenerateSecret()
	require.NoError(t, err)
	other, err := webhook.GenerateSecret()
	require.NoError(t, err)
	ran := make(chan string, 10)
	r := newRig(t, func(_ context.Context, task *taskworker.Task) (json.RawMessage, error) {
		ran <- task.ID
		return nil, nil
	}, func(c *taskworker.Config) { c.Secrets = append(c.Secrets, old) })

	code, _, _ := r.push(t, pushOf("t-old", 1, `1`, "", soon()), old)
	require.Equal(t, http.StatusAccepted, code, "the old secret of a rotation")
	require.Equal(t, "t-old", <-ran)

	body, err := json.Marshal(pushOf("t-bad", 1, `1`, "", soon()))
	require.NoError(t, err)
	sign := func(secret string, b []byte, at time.Time) http.Header {
		s, err := webhook.NewSigner(secret)
		require.NoError(t, err)
		h := http.Header{}
		require.NoError(t, s.Sign(h, "task/t-bad/1/1", at, b))
		return h
	}
	for name, h := range map[string]http.Header{
		"unsigned":       {},
		"another secret": sign(other, body, time.Now()),
		"stale":          sign(r.secret, body, time.Now().Add(-time.Hour)),
		"other body":     sign(r.secret, []byte(`{"task_id":"x"}`), time.Now()),
	} {
		code, _, out := r.send(t, body, h)
		require.Equal(t, http.StatusUnauthorized, code, "%s: %v", name, out)
	}

	// An authentic copy of a push already taken (same id, timestamp, body) starts nothing.
	h := sign(r.secret, body, time.Now())
	code, _, _ = r.send(t, body, h)
	require.Equal(t, http.StatusAccepted, code)
	code, _, out := r.send(t, body, h)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, true, out["duplicate"])
	require.Equal(t, "t-bad", <-ran)
	r.waitIdle(t)
	require.Empty(t, ran)
}

func TestMalformedPushes(t *testing.T) {
	r := newRig(t, func(context.Context, *taskworker.Task) (json.RawMessage, error) { return nil, nil },
		func(c *taskworker.Config) { c.Secrets, c.AllowUnsigned = nil, true })
	valid := func(edit func(m map[string]any)) []byte {
		b, err := json.Marshal(pushOf("t-x", 1, `1`, "10s", soon()))
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		edit(m)
		b, err = json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for name, body := range map[string][]byte{
		"not JSON":            []byte(`{"task_id":`),
		"an array":            []byte(`[]`),
		"no task_id":          valid(func(m map[string]any) { delete(m, "task_id") }),
		"task_id with /":      valid(func(m map[string]any) { m["task_id"] = "a/b" }),
		"version 0":           valid(func(m map[string]any) { m["task_version"] = 0 }),
		"no attempt":          valid(func(m map[string]any) { delete(m, "attempt") }),
		"attempt as a string": valid(func(m map[string]any) { m["attempt"] = "1" }),
		"no deadline":         valid(func(m map[string]any) { delete(m, "deadline") }),
		"bad heartbeat":       valid(func(m map[string]any) { m["heartbeat_timeout"] = "soon" }),
	} {
		code, _, out := r.send(t, body, nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", name, out)
	}
	code, _, _ := r.send(t, valid(func(m map[string]any) { m["a_field_courier_adds_later"] = 1 }), nil)
	require.Equal(t, http.StatusAccepted, code, "unknown fields are ignored")

	resp, err := http.Get(r.srv.URL + "/push")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestNewRefusesAnUnsafeConfig(t *testing.T) {
	c, err := client.New("http://127.0.0.1:1")
	require.NoError(t, err)
	h := func(context.Context, *taskworker.Task) (json.RawMessage, error) { return nil, nil }
	for name, cfg := range map[string]taskworker.Config{
		"no client":    {Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}},
		"no secrets":   {Client: c},
		"bad secret":   {Client: c, Secrets: []string{"hunter2"}},
		"bad fraction": {Client: c, AllowUnsigned: true, HeartbeatFraction: 1},
	} {
		_, err := taskworker.New(cfg, h)
		require.Error(t, err, name)
	}
	_, err = taskworker.New(taskworker.Config{Client: c, AllowUnsigned: true}, nil)
	require.Error(t, err, "no handler")
}

// Heartbeats go out while the handler runs, naming the attempt; a 409 ends the handler's
// context with ErrAttemptOver and nothing is reported.
func TestHeartbeatsAndTheirConflict(t *testing.T) {
	causes := make(chan error, 1)
	r := newRig(t, func(ctx context.Context, _ *taskworker.Task) (json.RawMessage, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, nil)
	r.courier.setAnswer(func(kind string, n int) int {
		if kind == "heartbeat" && n >= 3 {
			return http.StatusConflict
		}
		return map[string]int{"heartbeat": 200, "result": 202}[kind]
	})
	// Each heartbeat waits a third of the timeout for its answer: 1.5 s leaves a loaded
	// machine half a second to answer, so the 409 is never lost to the worker's own deadline.
	code, _, _ := r.push(t, pushOf("t-hb", 2, `1`, "1500ms", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, taskworker.ErrAttemptOver)
	case <-time.After(15 * time.Second):
		t.Fatal("the 409 did not end the handler's context")
	}
	r.waitIdle(t)
	hbs := r.courier.reports("heartbeat")
	require.Len(t, hbs, 3, "no heartbeat after the 409")
	for _, hb := range hbs {
		require.Equal(t, 2, hb.Attempt)
		require.Equal(t, "Bearer "+workerKey, hb.Auth)
	}
	require.Empty(t, r.courier.reports("result"))
}

// The handler's context ends at the push's deadline (ErrDeadline); nothing is reported.
func TestDeadlineEndsTheContext(t *testing.T) {
	causes := make(chan error, 1)
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		dl, ok := ctx.Deadline()
		if !ok || !dl.Equal(task.Deadline) {
			causes <- errors.New("the context's deadline is not the push's")
			return nil, nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, nil)
	code, _, _ := r.push(t, pushOf("t-dl", 1, `1`, "", time.Now().Add(200*time.Millisecond)), "")
	require.Equal(t, http.StatusAccepted, code)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, taskworker.ErrDeadline)
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not end the handler's context")
	}
	r.waitIdle(t)
	require.Empty(t, r.courier.reports("result"))
}

// Beyond MaxConcurrent a push is 429 with Retry-After; a repeat of a running attempt is 202 and
// takes no slot; a newer attempt of a running version ends the older one.
func TestConcurrencyDuplicatesAndNewerAttempts(t *testing.T) {
	release := make(chan struct{})
	causes := make(chan error, 4)
	r := newRig(t, func(ctx context.Context, _ *taskworker.Task) (json.RawMessage, error) {
		select {
		case <-release:
			return nil, nil
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}
	}, func(c *taskworker.Config) { c.MaxConcurrent, c.RetryAfter = 1, 1500*time.Millisecond })

	code, _, _ := r.push(t, pushOf("t-a", 1, `1`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	code, _, out := r.push(t, pushOf("t-a", 1, `1`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, true, out["duplicate"])
	code, h, out := r.push(t, pushOf("t-b", 1, `1`, "", soon()), "")
	require.Equal(t, http.StatusTooManyRequests, code, out)
	require.Equal(t, "2", h.Get("Retry-After"))
	require.Equal(t, 1, r.w.Running())

	// Attempt 2 of t-a: attempt 1 is moot. It is let in once attempt 1 has left its slot.
	code, _, _ = r.push(t, pushOf("t-a", 2, `1`, "", soon()), "")
	require.Contains(t, []int{http.StatusAccepted, http.StatusTooManyRequests}, code)
	require.ErrorIs(t, <-causes, taskworker.ErrSuperseded)
	if code == http.StatusTooManyRequests {
		r.waitIdle(t)
		code, _, _ = r.push(t, pushOf("t-a", 2, `1`, "", soon()), "")
		require.Equal(t, http.StatusAccepted, code)
	}
	close(release)
	rep := r.waitReports(t, "result", 1)
	require.Equal(t, 2, rep[0].Attempt)
	r.waitIdle(t)
	require.Len(t, r.courier.reports("result"), 1, "the superseded attempt reports nothing")
}

// A result meeting a 503 is tried again; a 409 is final.
func TestResultRetries(t *testing.T) {
	r := newRig(t, func(context.Context, *taskworker.Task) (json.RawMessage, error) { return json.RawMessage(`1`), nil }, nil)
	r.courier.setAnswer(func(kind string, n int) int {
		if kind == "result" && n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusAccepted
	})
	code, _, _ := r.push(t, pushOf("t-r", 1, `1`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	r.waitIdle(t)
	reps := r.courier.reports("result")
	require.Len(t, reps, 2)
	require.Equal(t, reps[0].Result, reps[1].Result)

	r.courier.setAnswer(func(string, int) int { return http.StatusConflict })
	code, _, _ = r.push(t, pushOf("t-late", 1, `1`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	r.waitIdle(t)
	require.Len(t, r.courier.reports("result"), 3, "a 409 is final")
}

// Shutdown waits for running work that finishes; once its context ends it cancels the rest,
// which report a 503 failure; new pushes are 503 from the start of Shutdown.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		if string(task.Payload) == `"stuck"` {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		<-release
		return json.RawMessage(`"done"`), nil
	}, nil)
	code, _, _ := r.push(t, pushOf("t-drain", 1, `"drains"`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		done <- r.w.Shutdown(ctx)
	}()
	require.Eventually(t, func() bool {
		code, _, _ := r.push(t, pushOf("t-new", 1, `1`, "", soon()), "")
		return code == http.StatusServiceUnavailable
	}, 5*time.Second, 10*time.Millisecond)
	close(release)
	require.NoError(t, <-done)
	rep := r.waitReports(t, "result", 1)[0]
	require.Equal(t, courier.OutcomeSuccess, rep.Result.Status, "work that finishes within the drain reports its success")

	r2 := newRig(t, func(ctx context.Context, _ *taskworker.Task) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, nil)
	code, _, _ = r2.push(t, pushOf("t-stuck", 4, `"stuck"`, "", soon()), "")
	require.Equal(t, http.StatusAccepted, code)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // no drain time
	require.ErrorIs(t, r2.w.Shutdown(ctx), context.Canceled)
	require.Zero(t, r2.w.Running())
	rep = r2.waitReports(t, "result", 1)[0]
	require.Equal(t, api.TaskResult{Attempt: 4, Status: courier.OutcomeFailure, StatusCode: 503,
		Message: "the worker shut down before the work finished"}, rep.Result)
}

// The push's W3C trace context becomes the handler's remote parent span, so the handler's own
// spans (and an instrumented result call) join the task's trace.
func TestHandlerContextCarriesThePushTrace(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got := make(chan trace.SpanContext, 1)
	r := newRig(t, func(ctx context.Context, task *taskworker.Task) (json.RawMessage, error) {
		got <- trace.SpanContextFromContext(ctx)
		return nil, nil
	}, nil)
	p := pushOf("t-trace", 1, `1`, "", soon())
	body, err := json.Marshal(p)
	require.NoError(t, err)
	s, err := webhook.NewSigner(r.secret)
	require.NoError(t, err)
	h := http.Header{}
	require.NoError(t, s.Sign(h, "task/t-trace/1/1", time.Now(), body))
	h.Set("traceparent", tp)
	code, _, out := r.send(t, body, h)
	require.Equal(t, http.StatusAccepted, code, out)
	sc := <-got
	require.True(t, sc.IsRemote())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", sc.SpanID().String())
	r.waitIdle(t)
}
