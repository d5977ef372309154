package main

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/webhook"
)

// courier queue list, show and set against a real gateway: an operator switches a queue to the
// batched mode and back, every other setting (secrets included) kept; a refused setting names
// its field; an unknown queue is not_found.
func TestQueueCommands(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Store(t, "sqlite")
	ctx := t.Context()
	_, admin, err := st.CreateAPIKey(ctx, "ops", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	quiet := slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Gatherer: prometheus.NewRegistry(),
		Logger: quiet, Tasks: tasks.NewService(st, nil, "default", nil, nil, quiet)}))
	t.Cleanup(srv.Close)
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	_, _, err = st.PutQueue(ctx, courier.Queue{Name: "docs", PushURL: "https://worker.example/push", Secrets: []string{secret},
		ConcurrencyLimit: 40, HeartbeatTimeout: time.Minute, PerKeyLimit: 5, DispatchRate: 30,
		Retry: courier.RetryPolicy{MaxAttempts: 9}}.WithDefaults())
	require.NoError(t, err)
	before, err := st.GetQueue(ctx, "docs")
	require.NoError(t, err)

	env := []string{"COURIER_URL=" + srv.URL, "COURIER_API_KEY=" + admin}
	run := func(args ...string) (string, string, int) {
		cmd := courierCmd(t, env, args...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return out.String(), errOut.String(), code
	}

	out, stderr, code := run("queue", "list")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^NAME +DISPATCH +PUSH BATCH +LIMIT +IN FLIGHT +STATE +PUSH URL$`, out)
	require.Regexp(t, `(?m)^docs +per-attempt +1 +40 +0 +running +https://worker.example/push$`, out)

	out, stderr, code = run("queue", "set", "--name", "docs", "--dispatch-mode", "batched", "--push-batch-size", "25")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "queue docs: dispatch_mode batched, push_batch_size 25, concurrency_limit 40 (was per-attempt, 1, 40)\n", out)
	after, err := st.GetQueue(ctx, "docs")
	require.NoError(t, err)
	require.Equal(t, courier.DispatchBatched, after.DispatchMode)
	require.Equal(t, 25, after.PushBatchSize)
	want := before
	want.DispatchMode, want.PushBatchSize, want.UpdatedAt = after.DispatchMode, after.PushBatchSize, after.UpdatedAt
	require.Equal(t, want, after, "every other setting kept, the secrets too")

	out, stderr, code = run("queue", "show", "--name", "docs")
	require.Equal(t, 0, code, stderr)
	var shown api.Queue
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, courier.DispatchBatched, shown.DispatchMode)
	require.Equal(t, 25, shown.PushBatchSize)
	require.Equal(t, 1, shown.SecretsCount)
	out, stderr, code = run("queue", "list", "--json")
	require.Equal(t, 0, code, stderr)
	var all []api.Queue
	require.NoError(t, json.Unmarshal([]byte(out), &all), out)
	modes := map[string]courier.DispatchMode{}
	for _, q := range all {
		modes[q.Name] = q.DispatchMode
	}
	require.Equal(t, map[string]courier.DispatchMode{"default": courier.DispatchPerAttempt, "docs": courier.DispatchBatched}, modes)

	// Back to one run per attempt: the push batch size goes back to 1 with it.
	out, stderr, code = run("queue", "set", "--name", "docs", "--dispatch-mode", "per-attempt", "--concurrency-limit", "60")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "queue docs: dispatch_mode per-attempt, push_batch_size 1, concurrency_limit 60 (was batched, 25, 40)\n", out)

	_, stderr, code = run("queue", "set", "--name", "docs", "--push-batch-size", "5")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "validation_failed")
	require.Contains(t, stderr, `push_batch_size above 1 needs "dispatch_mode": "batched"`)
	_, stderr, code = run("queue", "set", "--name", "docs", "--dispatch-mode", "sideways")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "dispatch_mode")
	_, stderr, code = run("queue", "set", "--name", "nope", "--dispatch-mode", "batched")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not_found")
	last, err := st.GetQueue(ctx, "docs")
	require.NoError(t, err)
	require.Equal(t, courier.DispatchPerAttempt, last.DispatchMode, "a refused set changes nothing")
	require.Equal(t, 60, last.ConcurrencyLimit)
}
