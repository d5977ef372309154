package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
)

const testKey = "test-producer-key"

// client bounds every request, so a handler that blocks fails the test quickly.
var client = &http.Client{Timeout: 5 * time.Second}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// courierCall is one request the fake courier gateway received.
type courierCall struct {
	Method, Path, Auth string
	Body               []byte
}

// fakeCourier plays courier's gateway: it checks the Bearer key, records every request and
// answers with respond (200 {} when nil).
type fakeCourier struct {
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []courierCall
	respond func(r *http.Request) (int, string)
}

func newFakeCourier(t *testing.T) *fakeCourier {
	t.Helper()
	f := &fakeCourier{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.calls = append(f.calls, courierCall{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization"), Body: body})
		respond := f.respond
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"code":"unauthenticated","message":"bad API key"}}`)
			return
		}
		status, out := http.StatusOK, `{}`
		if respond != nil {
			status, out = respond(r)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCourier) setRespond(fn func(r *http.Request) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.respond = fn
}

func (f *fakeCourier) Calls() []courierCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]courierCall(nil), f.calls...)
}

// testEnv is an orders service on a fresh SQLite file, talking to courierURL.
type testEnv struct {
	srv    *httptest.Server
	db     *bun.DB
	svc    *Service
	secret string
}

func newTestEnv(t *testing.T, courierURL string) *testEnv {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "orders.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	db := st.DB()
	require.NoError(t, SetupDB(ctx, db))
	require.NoError(t, SetupDB(ctx, db), "setup must be idempotent")
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	svc := &Service{DB: db, Verifier: v, BizType: defaultBizType, Timeout: 30 * time.Minute, Log: quietLogger(),
		Courier: &CourierClient{BaseURL: courierURL, Key: testKey, HTTP: &http.Client{Timeout: 2 * time.Second}}}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return &testEnv{srv: srv, db: db, svc: svc, secret: secret}
}

// call sends method path with body (may be "") and decodes the JSON answer.
func (e *testEnv) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	} else {
		out = map[string]any{"text": string(raw)}
	}
	return resp.StatusCode, out
}

// createOrder creates an order through the API and returns its id.
func (e *testEnv) createOrder(t *testing.T, item string) string {
	t.Helper()
	status, body := e.call(t, http.MethodPost, "/orders", `{"item":"`+item+`"}`)
	require.Equal(t, http.StatusCreated, status, body)
	return body["id"].(string)
}

func (e *testEnv) status(t *testing.T, id string) string {
	t.Helper()
	var s string
	require.NoError(t, e.db.QueryRowContext(context.Background(), `SELECT status FROM orders WHERE id = ?`, id).Scan(&s))
	return s
}

func count(t *testing.T, db *bun.DB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(context.Background(), query, args...).Scan(&n))
	return n
}

// postCallback sends a callback body signed with secret as webhook-id id, like courier does.
func (e *testEnv) postCallback(t *testing.T, secret, id string, body []byte) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+CallbackPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	signer, err := webhook.NewSigner(secret)
	require.NoError(t, err)
	require.NoError(t, signer.Sign(req.Header, id, time.Now(), body))
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	out := map[string]any{"text": string(raw)}
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	return resp.StatusCode, out
}
