package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/webhook"
)

const testKey = "test-worker-key"

// client bounds every request, so a handler that blocks fails the test quickly.
var client = &http.Client{Timeout: 5 * time.Second}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// courierCall is one report the fake courier gateway received.
type courierCall struct {
	Kind    string // "heartbeat" or "result"
	TaskID  string
	Version string
	Auth    string
	Attempt int                // from the body
	Result  courier.TaskResult // for a result
}

// fakeCourier plays courier's gateway for the report endpoints: it records every heartbeat
// and result and answers them with heartbeat and result (nil: 200 and 202). A request
// without the test key is answered 401.
type fakeCourier struct {
	srv       *httptest.Server
	mu        sync.Mutex
	calls     []courierCall
	heartbeat func(n int) int // status for the n-th heartbeat (from 1)
	result    func(n int) int // status for the n-th result (from 1)
}

func newFakeCourier(t *testing.T) *fakeCourier {
	t.Helper()
	f := &fakeCourier{}
	mux := http.NewServeMux()
	for _, kind := range []string{"heartbeat", "result"} {
		mux.HandleFunc("POST /v1/tasks/{id}/versions/{v}/"+kind, func(w http.ResponseWriter, r *http.Request) {
			call := courierCall{Kind: kind, TaskID: r.PathValue("id"), Version: r.PathValue("v"), Auth: r.Header.Get("Authorization")}
			if kind == "result" {
				_ = json.NewDecoder(r.Body).Decode(&call.Result)
				call.Attempt = call.Result.Attempt
			} else {
				var hb struct{ Attempt int }
				_ = json.NewDecoder(r.Body).Decode(&hb)
				call.Attempt = hb.Attempt
			}
			f.mu.Lock()
			f.calls = append(f.calls, call)
			n := 0
			for _, c := range f.calls {
				if c.Kind == kind {
					n++
				}
			}
			answer := map[string]func(int) int{"heartbeat": f.heartbeat, "result": f.result}[kind]
			f.mu.Unlock()
			status := map[string]int{"heartbeat": http.StatusOK, "result": http.StatusAccepted}[kind]
			if call.Auth != "Bearer "+testKey {
				status = http.StatusUnauthorized
			} else if answer != nil {
				status = answer(n)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if status >= 300 {
				_, _ = io.WriteString(w, `{"error":{"code":"conflict","message":"attempt `+strconv.Itoa(call.Attempt)+` is not running"}}`)
				return
			}
			_, _ = io.WriteString(w, `{"accepted":true}`)
		})
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// Calls returns the reports so far; kind "" means all of them, in order.
func (f *fakeCourier) Calls(kind string) []courierCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []courierCall
	for _, c := range f.calls {
		if kind == "" || c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// testWorker is a docparse worker behind an httptest server, reporting to a fake courier. Its
// simulated parse waits for release (or for its attempt to end), not for the clock.
type testWorker struct {
	*Worker
	srv     *httptest.Server
	courier *fakeCourier
	secret  string
	release chan struct{}
	once    sync.Once
}

// newTestWorker starts a worker; with signed, it verifies pushes with a fresh secret.
func newTestWorker(t *testing.T, signed bool) *testWorker {
	t.Helper()
	f := newFakeCourier(t)
	cfg := Config{Addr: "unused", CourierURL: f.srv.URL, APIKey: testKey, ParseTime: time.Hour}
	if signed {
		secret, err := webhook.GenerateSecret()
		require.NoError(t, err)
		cfg.Secret = secret
	}
	w, err := NewWorker(cfg, quietLogger())
	require.NoError(t, err)
	tw := &testWorker{Worker: w, courier: f, secret: cfg.Secret, release: make(chan struct{})}
	w.retryWait = 10 * time.Millisecond
	w.sleep = func(ctx context.Context, d time.Duration) error {
		assert.Equal(t, time.Hour, d, "the configured parse time") // not require: this runs in the worker's goroutine
		select {
		case <-tw.release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	tw.srv = httptest.NewServer(w.Handler())
	t.Cleanup(func() {
		tw.finishParsing()
		tw.srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return tw
}

// finishParsing lets every running (and future) parse complete.
func (tw *testWorker) finishParsing() { tw.once.Do(func() { close(tw.release) }) }

// pushFor builds the push courier would send for attempt of task id, version 1.
func (tw *testWorker) pushFor(id string, attempt int, payload string, heartbeatTimeout string) activities.TaskPush {
	base := tw.courier.srv.URL + "/v1/tasks/" + id + "/versions/1/"
	return activities.TaskPush{TaskID: id, TaskVersion: 1, Attempt: attempt, Priority: 2, Queue: "default",
		Payload: json.RawMessage(payload), Deadline: time.Now().Add(time.Minute).UTC(), HeartbeatTimeout: heartbeatTimeout,
		ResultURL: base + "result", HeartbeatURL: base + "heartbeat"}
}

// send POSTs body to /push with headers h and returns the status and decoded answer.
func (tw *testWorker) send(t *testing.T, body []byte, h http.Header) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tw.srv.URL+PushPath, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// push sends p the way courier does: signed when the worker has a secret.
func (tw *testWorker) push(t *testing.T, p activities.TaskPush) (int, map[string]any) {
	t.Helper()
	body, err := json.Marshal(p)
	require.NoError(t, err)
	h := http.Header{}
	if tw.secret != "" {
		tw.sign(t, tw.secret, h, body, time.Now())
	}
	return tw.send(t, body, h)
}

func (tw *testWorker) sign(t *testing.T, secret string, h http.Header, body []byte, at time.Time) {
	t.Helper()
	s, err := webhook.NewSigner(secret)
	require.NoError(t, err)
	require.NoError(t, s.Sign(h, "task/doc/1/1", at, body))
}

// waitIdle waits until no attempt runs.
func (tw *testWorker) waitIdle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { return tw.Running() == 0 }, 5*time.Second, 5*time.Millisecond)
}

// waitCalls waits until the fake courier got at least n reports of kind and returns them.
func (tw *testWorker) waitCalls(t *testing.T, kind string, n int) []courierCall {
	t.Helper()
	require.Eventually(t, func() bool { return len(tw.courier.Calls(kind)) >= n }, 5*time.Second, 5*time.Millisecond,
		"want %d %s reports", n, kind)
	return tw.courier.Calls(kind)
}
