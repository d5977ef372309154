package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
)

// workerReadiness is a worker's /readyz answer, and its courier_ready metric.
type workerReadiness struct {
	code   int
	checks map[string]string
	metric string // the courier_ready{role="worker"} line of /metrics
}

func getReadiness(t *testing.T, base string) workerReadiness {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, resp.StatusCode == http.StatusOK, body.Ready)
	r := workerReadiness{code: resp.StatusCode, checks: body.Checks}
	mresp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer mresp.Body.Close()
	raw, err := io.ReadAll(mresp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, `courier_ready{role="worker"}`) {
			r.metric = line
		}
	}
	return r
}

// A production worker's /readyz answers 503 while its database or Temporal is gone (each
// reached through a proxy the test cuts), naming it and its stalled claim loops, and 200 again
// once it is back; courier_ready{role="worker"}, which CourierNoWorkerReady watches, follows.
// /healthz stays 200 throughout: a worker whose dependency is down is unready, not wedged.
func TestWorkerReadiness(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	ctx := t.Context()
	dsn := testenv.PostgresURL(t)
	st, err := store.Open(ctx, dsn)
	require.NoError(t, err)
	require.NoError(t, schema.Up(ctx, st.DB(), schema.AllSets...))
	require.NoError(t, st.Close())
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)

	u, err := url.Parse(dsn)
	require.NoError(t, err)
	dbProxy := startTCPProxy(t, u.Host)
	u.Host = dbProxy.Addr()
	temporalProxy := startTCPProxy(t, tmp.Address())

	port := freePort(t)
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runWorker(wctx, []string{"--database-url", u.String(), "--temporal-address", temporalProxy.Addr(),
			"--temporal-namespace", tmp.Namespace(), "--nats-url", ns.URL(), "--http-addr", fmt.Sprintf("127.0.0.1:%d", port),
			"--outbox-poll", "100ms", "--task-poll", "100ms", "--public-url", "http://127.0.0.1:1", "--log-level", "error"})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Error("the worker did not stop")
		}
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	live := func() int {
		resp, err := http.Get(base + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	var last workerReadiness
	ready := func() bool {
		if _, err := http.Get(base + "/healthz"); err != nil {
			return false // not listening yet
		}
		last = getReadiness(t, base)
		return last.code == http.StatusOK
	}
	require.Eventually(t, ready, time.Minute, 100*time.Millisecond, "the worker becomes ready: %+v", last)
	require.Equal(t, map[string]string{"database": "ok", "temporal": "ok", "mq:default": "ok", "pollers": "ok",
		"loop:relay:default": "ok", "loop:claimer": "ok"}, last.checks)
	require.Equal(t, `courier_ready{role="worker"} 1`, last.metric)

	for _, dep := range []struct {
		name  string
		proxy *tcpProxy
		loops bool // the claim loops need it for a pass
	}{{"database", dbProxy, true}, {"temporal", temporalProxy, false}} {
		dep.proxy.setCut(true)
		require.Eventually(t, func() bool {
			last = getReadiness(t, base)
			return last.code == http.StatusServiceUnavailable && last.checks[dep.name] == "down" &&
				(!dep.loops || last.checks["loop:relay:default"] == "down" && last.checks["loop:claimer"] == "down")
		}, time.Minute, 100*time.Millisecond, "%s gone: the worker is unready: %+v", dep.name, last)
		require.Equal(t, `courier_ready{role="worker"} 0`, last.metric)
		require.Equal(t, http.StatusOK, live(), "a worker without its %s is not wedged", dep.name)

		dep.proxy.setCut(false)
		require.Eventually(t, ready, 2*time.Minute, 100*time.Millisecond, "%s back: the worker is ready again: %+v", dep.name, last)
		require.Equal(t, `courier_ready{role="worker"} 1`, last.metric)
	}
}
