package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

const report = `{"name":"q3.txt","text":"Revenue grew.\fCosts fell sharply.\f\f"}`

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// instant is a Parser whose parse takes no time.
func instant() *Parser {
	return &Parser{sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
}

func TestHandleCountsTheDocument(t *testing.T) {
	t.Parallel()
	task := &taskworker.Task{ID: "doc-1", Version: 1, Attempt: 1, Payload: json.RawMessage(report)}
	out, err := instant().Handle(t.Context(), task)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"q3.txt","pages":2,"words":5,"characters":35}`, string(out))
	require.Equal(t, "parsed 2 pages, 5 words", task.Message())
}

// A payload that is not a document fails at once with 422 and the reason, before any parse.
func TestHandleRefusesAnUnusablePayload(t *testing.T) {
	t.Parallel()
	p := &Parser{sleep: func(context.Context, time.Duration) error { panic("no parse for an unusable payload") }}
	for _, payload := range []string{`null`, `"just a string"`, `[1,2]`, `{}`, `{"name":"x.txt"}`, `{"text":"  \f \n"}`, `{"text":42}`} {
		_, err := p.Handle(t.Context(), &taskworker.Task{Payload: json.RawMessage(payload)})
		var f *taskworker.Failure
		require.ErrorAs(t, err, &f, payload)
		require.Equal(t, StatusUnusable, f.StatusCode)
		require.ErrorIs(t, err, ErrUnusablePayload)
	}
}

// The parse stops when the attempt's context ends (deadline, cancel, shutdown).
func TestHandleStopsWhenTheAttemptEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(taskworker.ErrAttemptOver)
	_, err := NewParser(time.Hour).Handle(ctx, &taskworker.Task{Payload: json.RawMessage(report)})
	require.ErrorIs(t, err, taskworker.ErrAttemptOver)
}

// fakeCourier plays courier's report endpoints and records what docparse sends.
type fakeCourier struct {
	srv        *httptest.Server
	mu         sync.Mutex
	heartbeats []int // attempts
	results    []api.TaskResult
	auth       []string
}

func newFakeCourier(t *testing.T) *fakeCourier {
	f := &fakeCourier{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks/{id}/versions/{v}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var hb struct{ Attempt int }
		_ = json.NewDecoder(r.Body).Decode(&hb)
		f.mu.Lock()
		f.heartbeats = append(f.heartbeats, hb.Attempt)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		_, _ = io.WriteString(w, `{"accepted":true}`)
	})
	mux.HandleFunc("POST /v1/tasks/{id}/versions/{v}/result", func(w http.ResponseWriter, r *http.Request) {
		var res api.TaskResult
		_ = json.NewDecoder(r.Body).Decode(&res)
		f.mu.Lock()
		f.results = append(f.results, res)
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"accepted":true}`)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCourier) snapshot() ([]int, []api.TaskResult, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.heartbeats...), append([]api.TaskResult(nil), f.results...), append([]string(nil), f.auth...)
}

// docparse as it runs: a signed push is answered 202 while the parse runs, heartbeats go out
// with the worker key, and the result follows; an unusable payload ends in a 422 failure; an
// unsigned push is refused.
func TestPushesEndInResults(t *testing.T) {
	f := newFakeCourier(t)
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	release := make(chan struct{})
	p := &Parser{ParseTime: time.Hour, sleep: func(ctx context.Context, d time.Duration) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	w, err := NewWorker(Config{Addr: "unused", CourierURL: f.srv.URL, APIKey: "k-worker", Secrets: []string{secret}}, p, quietLogger())
	require.NoError(t, err)
	srv := httptest.NewServer(w)
	t.Cleanup(func() {
		srv.Close()
		_ = w.Shutdown(context.Background())
	})
	push := func(id, payload string, hb time.Duration, signed bool) int {
		body, err := json.Marshal(taskworker.Push{TaskID: id, TaskVersion: 1, Attempt: 3, Priority: 2, Queue: "default",
			Payload: json.RawMessage(payload), Deadline: time.Now().Add(time.Minute), HeartbeatTimeout: api.PositiveDuration(hb)})
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPost, srv.URL+PushPath, bytes.NewReader(body))
		require.NoError(t, err)
		if signed {
			s, err := webhook.NewSigner(secret)
			require.NoError(t, err)
			require.NoError(t, s.Sign(req.Header, "task/"+id+"/1/3", time.Now(), body))
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	require.Equal(t, http.StatusUnauthorized, push("doc-forged", report, 0, false))
	require.Equal(t, http.StatusAccepted, push("doc-1", report, 1500*time.Millisecond, true))
	require.Eventually(t, func() bool { hbs, _, _ := f.snapshot(); return len(hbs) >= 2 }, 10*time.Second, 10*time.Millisecond)
	_, results, _ := f.snapshot()
	require.Empty(t, results, "no result while the parse runs")
	close(release)
	require.Eventually(t, func() bool { _, res, _ := f.snapshot(); return len(res) == 1 }, 10*time.Second, 10*time.Millisecond)

	require.Equal(t, http.StatusAccepted, push("doc-bad", `{"image":"scan.png"}`, 0, true))
	require.Eventually(t, func() bool { _, res, _ := f.snapshot(); return len(res) == 2 }, 10*time.Second, 10*time.Millisecond)

	hbs, results, auth := f.snapshot()
	for _, a := range hbs {
		require.Equal(t, 3, a)
	}
	for _, a := range auth {
		require.Equal(t, "Bearer k-worker", a)
	}
	require.Equal(t, api.TaskResult{Attempt: 3, Status: courier.OutcomeSuccess, StatusCode: 200,
		Message: "parsed 2 pages, 5 words", Result: json.RawMessage(`{"name":"q3.txt","pages":2,"words":5,"characters":35}`)}, results[0])
	require.Equal(t, courier.OutcomeFailure, results[1].Status)
	require.Equal(t, StatusUnusable, results[1].StatusCode)
	require.Contains(t, results[1].Message, "unusable payload")
}
