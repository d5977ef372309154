package main

import (
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/pauses"
)

// courier pause, resume and pauses against a real gateway: the pause is stored with its
// reason and who made it, listed, refused without exactly one target, and lifted.
func TestPauseCommands(t *testing.T) {
	t.Parallel()
	st, _ := testenv.Store(t, "sqlite")
	_, admin, err := st.CreateAPIKey(t.Context(), "ops", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Gatherer: prometheus.NewRegistry(),
		Logger: slog.New(slog.DiscardHandler), Pauses: pauses.NewService(st, slog.New(slog.DiscardHandler))}))
	t.Cleanup(srv.Close)
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

	out, _, code := run("pauses")
	require.Equal(t, 0, code)
	require.Equal(t, "nothing is paused\n", out)

	out, stderr, code := run("pause", "--topic", "orders.>", "--reason", "broker move")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "paused topic orders.> (by api key ops (")
	require.Contains(t, out, "): broker move")
	list, err := st.ListPauses(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>", Reason: "broker move", PausedBy: list[0].PausedBy, PausedAt: list[0].PausedAt}, list[0])

	out, _, code = run("pauses")
	require.Equal(t, 0, code)
	require.Contains(t, out, "topic orders.> (by api key ops")

	_, stderr, code = run("pause", "--queue", "docs", "--topic", "orders.>")
	require.Equal(t, 2, code, "two targets is a usage mistake")
	require.Contains(t, stderr, "exactly one of --queue, --biz-type and --topic")
	_, stderr, code = run("pause", "--queue", "Not A Name")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "invalid_argument")

	out, stderr, code = run("resume", "--topic", "orders.>")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "resumed topic orders.> after ")
	_, stderr, code = run("resume", "--topic", "orders.>")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "not_found")
	list, err = st.ListPauses(t.Context())
	require.NoError(t, err)
	require.Empty(t, list)
}
