package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/webhook"
)

// The fault test of schedules on the timer wheel (issue 33, docs/timers.md "Schedules on the
// wheel"): 2,000 interval schedules firing every 2 s on a bucketed business type, two courier
// nodes (a worker and a gateway process each) on a private PostgreSQL, Temporal in this
// process. Mid-load node 1 is SIGKILLed and started again, then node 2, then PostgreSQL is
// restarted in immediate mode. Every (schedule, fire time) of the window is delivered, and
// every delivery of it carries one delivery id: none missed, none triggered twice.
func TestWheelSchedulesUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Temporal, PostgreSQL and four courier processes")
	}
	const (
		schedules = 2000
		interval  = 2 * time.Second
		bizType   = "faults.tick"
	)
	ctx := t.Context()
	began := time.Now()
	pg := startFaultPostgres(t)
	_, err := pg.CreateDatabase(ctx, "courier")
	require.NoError(t, err)
	dsn := pg.URL("courier")
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	env := []string{"DATABASE_URL=" + dsn, "TEMPORAL_ADDRESS=" + tmp.Address(), "TEMPORAL_NAMESPACE=" + tmp.Namespace(),
		"NATS_URL=" + ns.URL(), "COURIER_ALLOW_LOOPBACK=true", "COURIER_LOG_LEVEL=warn"}
	out, err := courierCmd(t, env, "migrate").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = courierCmd(t, env, "apikey", "create", "--name", "faults", "--scopes", "admin").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var key string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "key:"); ok {
			key = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, key)

	var nodes []*faultNode
	var gateways []string
	for i := 1; i <= 2; i++ {
		gw, wk := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
		n := &faultNode{name: fmt.Sprintf("node %d", i), gatewayURL: "http://" + gw, workerURL: "http://" + wk}
		n.gateway = newCourierProc(t, fmt.Sprintf("gateway-%d", i), append(slices.Clone(env), "COURIER_HTTP_ADDR="+gw), "gateway")
		n.worker = newCourierProc(t, fmt.Sprintf("worker-%d", i), append(slices.Clone(env), "COURIER_HTTP_ADDR="+wk), "worker")
		nodes = append(nodes, n)
		gateways = append(gateways, n.gatewayURL)
	}
	for _, n := range nodes {
		n.start(t)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				n.worker.printTail(t)
				n.gateway.printTail(t)
			}
		}
	})

	// The receiver: every trigger's deliveries, by biz id (<schedule>@<fire time>).
	secret := "whsec_" + strings.Repeat("Zm9ydHl0d28", 4)
	verifier, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	var mu sync.Mutex
	got := map[string]map[string]bool{} // biz id → delivery ids
	bad := 0
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := verifier.Verify(body, r.Header); err != nil && err != webhook.ErrReplay {
			bad++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var cb api.TimerCallback
		if json.Unmarshal(body, &cb) != nil || time.Now().Before(cb.FireAt) {
			bad++ // unreadable, or early
		}
		if got[cb.BizID] == nil {
			got[cb.BizID] = map[string]bool{}
		}
		got[cb.BizID][cb.DeliveryID] = true
	}))
	t.Cleanup(rcv.Close)

	require.Equal(t, 201, httpJSON(t, "PUT", gateways[0]+"/v1/biz-types/"+bizType, key, map[string]any{
		"delivery": "http", "callback_url": rcv.URL, "secrets": []string{secret}, "timer_mode": "bucketed",
		"retry": map[string]any{"initial_interval": "1s", "max_attempts": 20}}, nil))
	// The schedules, through both gateways. A catch-up window of 10 minutes: the faults must
	// not make a trigger count as missed for being slow (TestWheelScheduleCatchup tests the
	// window).
	var wg sync.WaitGroup
	work := make(chan int)
	for g := range 8 {
		wg.Go(func() {
			for i := range work {
				status := httpJSON(t, "PUT", gateways[g%2]+"/v1/schedules/"+fmt.Sprintf("f-%04d", i), key, map[string]any{
					"biz_type": bizType, "interval": interval.String(), "jitter": "1999ms", "catchup_window": "10m"}, nil)
				if status != 201 {
					t.Errorf("schedule %d: %d", i, status)
				}
			}
		})
	}
	for i := range schedules {
		work <- i
	}
	close(work)
	wg.Wait()
	require.False(t, t.Failed())
	from := time.Now().Truncate(interval).Add(2 * interval)
	t.Logf("%5.1fs: %d schedules created; the window opens at %s", time.Since(began).Seconds(), schedules, from.Format(time.TimeOnly))

	// The faults, 10 s apart.
	for i, f := range []string{"SIGKILL node 1", "SIGKILL node 2", "PostgreSQL restarted in immediate mode"} {
		time.Sleep(time.Until(from.Add(time.Duration(5+10*i) * time.Second))) // the faults land at set times of the window
		switch i {
		case 0, 1:
			nodes[i].kill()
			t.Logf("%5.1fs: %s", time.Since(began).Seconds(), f)
			nodes[i].start(t)
		default:
			require.NoError(t, pg.Restart(ctx))
			t.Logf("%5.1fs: %s", time.Since(began).Seconds(), f)
		}
	}
	to := from.Add(40 * time.Second)

	// Every (schedule, fire time) of the window arrives.
	want := func() (missing []string) {
		mu.Lock()
		defer mu.Unlock()
		for i := range schedules {
			for at := from; at.Before(to); at = at.Add(interval) {
				k := fmt.Sprintf("f-%04d@%s", i, at.UTC().Format(time.RFC3339Nano))
				if len(got[k]) == 0 {
					missing = append(missing, k)
				}
			}
		}
		return missing
	}
	require.Eventually(t, func() bool { return len(want()) == 0 }, 5*time.Minute, time.Second,
		"every (schedule, fire time) of the window is delivered")
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for k, ids := range got {
		if len(ids) > 1 {
			twice = append(twice, k)
		}
	}
	t.Logf("%5.1fs: %d triggers delivered (%d in the window)", time.Since(began).Seconds(), len(got), schedules*int(to.Sub(from)/interval))
	require.Zero(t, bad, "no bad signature, unreadable body or early delivery")
	require.Empty(t, twice, "no (schedule, fire time) is triggered as two deliveries")
}
