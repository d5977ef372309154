package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
)

// openRuns stands in for Temporal: the workflow ids in open have a run that never closes.
type openRuns struct {
	mu   sync.Mutex
	open map[string]bool
}

func (r *openRuns) WaitClosed(ctx context.Context, id string) error {
	r.mu.Lock()
	open := r.open[id]
	r.mu.Unlock()
	if open {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// POST /v1/outbox/redrive: the filter picks dead records by topic pattern and dead time, max
// bounds one call and more says what is left, records with an open run are busy and stay dead,
// the relay is woken, and bad filters are refused.
func TestBulkRedriveAPI(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Store(t, "sqlite")
	ctx := t.Context()
	_, admin, err := st.CreateAPIKey(ctx, "admin", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	_, producer, err := st.CreateAPIKey(ctx, "p", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(t, err)
	runs := &openRuns{open: map[string]bool{}}
	var wakes atomic.Int32
	srv := newServer(t, gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Runs: runs,
		Gatherer: prometheus.NewRegistry(), Wake: func() { wakes.Add(1) }}))
	f := &fixture{url: srv.URL, st: st}

	var ids []int64
	for _, tp := range []string{"orders.created", "orders.paid", "orders.created.eu", "users.created", "orders.created", "orders.created"} {
		rec, err := st.EnqueueOutbox(ctx, outbox.Message{Topic: tp, Payload: []byte(`{}`)})
		require.NoError(t, err)
		ok, err := st.MarkOutboxDead(ctx, rec.ID, "no stream")
		require.NoError(t, err)
		require.True(t, ok)
		ids = append(ids, rec.ID)
	}
	runs.open[courier.OutboxWorkflowID(courier.DefaultSource, ids[5])] = true

	redrive := func(body string) (int, api.RedriveResult, api.ErrorBody) {
		t.Helper()
		resp, eb := f.do(t, "POST", "/v1/outbox/redrive", admin, "application/json", strings.NewReader(body))
		var res api.RedriveResult
		if resp.StatusCode == 200 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
		}
		return resp.StatusCode, res, eb
	}
	status := func(id int64) courier.OutboxStatus {
		rec, err := st.GetOutbox(ctx, id)
		require.NoError(t, err)
		return rec.Status
	}

	code, res, eb := redrive(`{"topic":"orders.*","max":1}`)
	require.Equal(t, 200, code, "%+v", eb)
	require.Equal(t, api.NewRedriveResult(1, 0, true), res)
	require.Equal(t, courier.OutboxPending, status(ids[0]))
	require.Equal(t, int32(1), wakes.Load())

	code, res, _ = redrive(`{"topic":"orders.*","dead_before":"` + time.Now().Add(time.Hour).Format(time.RFC3339) + `"}`)
	require.Equal(t, 200, code)
	require.Equal(t, api.NewRedriveResult(2, 1, false), res, "ids 1 and 4 redriven; 5's run is open")
	require.Equal(t, api.BulkResult{Matched: 3, Done: 2, Skipped: 1}, res.BulkResult, "the answer every bulk action gives")
	require.Equal(t, courier.OutboxDead, status(ids[5]))
	require.Equal(t, courier.OutboxDead, status(ids[2]), "orders.created.eu is not orders.*")
	require.Equal(t, courier.OutboxDead, status(ids[3]))

	code, res, _ = redrive(`{"dead_after":"` + time.Now().Add(time.Hour).Format(time.RFC3339) + `"}`)
	require.Equal(t, 200, code)
	require.Equal(t, api.NewRedriveResult(0, 0, false), res, "nothing died in the future")
	resp, eb := f.do(t, "POST", "/v1/outbox/redrive", admin, "application/json",
		strings.NewReader(`{"dead_after":"`+time.Now().Add(time.Hour).Format(time.RFC3339)+`"}`))
	require.Equal(t, 200, resp.StatusCode, "%+v", eb)
	require.Empty(t, resp.Header.Get("Deprecation"))
	var wire map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&wire))
	require.Equal(t, map[string]any{"matched": 0.0, "done": 0.0, "skipped": 0.0, "more": false}, wire,
		"the uniform fields only: the old names redriven and busy are gone")
	// dead_since, dead_after's old name, is refused (422 naming dead_after), alone or beside
	// dead_after, and redrives nothing: courier keeps no aliases before 1.0.
	for _, body := range []string{`{"dead_since":"2020-01-01T00:00:00Z"}`, `{"dead_since":"2026-01-01T00:00:00Z","dead_after":"2026-01-01T00:00:00Z"}`} {
		code, _, eb = redrive(body)
		require.Equal(t, 422, code, body)
		require.Equal(t, courier.CodeValidation, eb.Error.Code, body)
		require.Equal(t, "dead_since", eb.Error.Details["field"], body)
		require.Equal(t, "dead_after", eb.Error.Details["use"], body)
		require.Contains(t, eb.Error.Message, "renamed dead_after", body)
	}
	require.Equal(t, courier.OutboxDead, status(ids[5]), "a refused redrive redrives nothing")

	runs.mu.Lock()
	runs.open = map[string]bool{}
	runs.mu.Unlock()
	code, res, _ = redrive(`{}`)
	require.Equal(t, 200, code)
	require.Equal(t, api.NewRedriveResult(3, 0, false), res)
	for _, id := range ids {
		require.Equal(t, courier.OutboxPending, status(id))
	}

	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"topic":"orders.>.x"}`, 400, "topic"},
		{`{"topic":"$JS.API"}`, 400, "topic"},
		{`{"max":0}`, 422, "max"},
		{`{"max":10001}`, 422, "max"},
		{`{"dead_after":"2026-01-02T00:00:00Z","dead_before":"2026-01-01T00:00:00Z"}`, 422, "dead_after"},
		{`{"source":"nope"}`, 404, "source"},
		{`{"source":"Bad Name"}`, 400, "source"},
	} {
		code, _, eb := redrive(tc.body)
		require.Equal(t, tc.code, code, "%s: %+v", tc.body, eb)
		require.Equal(t, tc.field, eb.Error.Details["field"], tc.body)
	}
	resp, eb = f.do(t, "POST", "/v1/outbox/redrive", producer, "application/json", strings.NewReader(`{}`))
	require.Equal(t, 403, resp.StatusCode, "%+v", eb)
}
