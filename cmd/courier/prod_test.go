package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/testenv"
)

// courierCmd runs a courier subcommand in a subprocess of this test binary with the given environment.
func courierCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), "COURIER_AS_MAIN=1"), env...)
	return cmd
}

// The production roles against a separate Temporal server, PostgreSQL and NATS: migrate, an API
// key, a worker and a gateway as their own processes; a record published through the gateway
// is delivered; both stop with exit 0 on SIGTERM.
func TestProductionRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	dsn := testenv.PostgresURL(t)
	ctx := t.Context()
	// No search attributes at namespace creation: the worker registers them itself, as it must
	// against a production cluster.
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	gwPort, wkPort := freePort(t), freePort(t)
	env := []string{
		"DATABASE_URL=" + dsn, "TEMPORAL_ADDRESS=" + tmp.Address(), "TEMPORAL_NAMESPACE=" + tmp.Namespace(),
		"NATS_URL=" + ns.URL(), "COURIER_OUTBOX_POLL=100ms",
	}

	out, err := courierCmd(t, env, "migrate").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "outbox: applied")
	out, err = courierCmd(t, env, "apikey", "create", "--name", "ops", "--scopes", "producer").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var key string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "key:"); ok {
			key = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, key)

	start := func(role string, port int) (*exec.Cmd, *bytes.Buffer, chan error) {
		cmd := courierCmd(t, append(env, fmt.Sprintf("COURIER_HTTP_ADDR=127.0.0.1:%d", port)), role)
		buf := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = buf, buf
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd, buf, done
	}
	wk, wkOut, wkDone := start("worker", wkPort)
	gw, gwOut, gwDone := start("gateway", gwPort)
	for _, port := range []int{wkPort, gwPort} {
		require.Eventually(t, func() bool {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", port))
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}, time.Minute, 100*time.Millisecond, "worker:\n%s\ngateway:\n%s", wkOut, gwOut)
	}

	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	require.NoError(t, err)
	gwURL := fmt.Sprintf("http://127.0.0.1:%d", gwPort)
	var rec struct{ ID int64 }
	require.Equal(t, 201, httpJSON(t, "POST", gwURL+"/v1/outbox", key, map[string]any{"topic": "orders.created", "payload": 1}, &rec))
	require.Eventually(t, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 1
	}, time.Minute, 100*time.Millisecond, "the worker process delivered it")
	var ready map[string]any
	require.Equal(t, 200, httpJSON(t, "GET", gwURL+"/readyz", "", nil, &ready))

	for name, p := range map[string]struct {
		cmd  *exec.Cmd
		done chan error
	}{"worker": {wk, wkDone}, "gateway": {gw, gwDone}} {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-p.done:
			require.NoError(t, err, "%s exits 0 on SIGTERM", name)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not stop", name)
		}
	}
}
