package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// mostInAnyWindow is the most of the sorted times that fall in any window of width w.
func mostInAnyWindow(times []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// TestTasksDispatchRate: a queue's dispatch rate holds across two courier workers claiming at
// once. 60 tasks, a rate of 10 per second with a burst of 5, a concurrency limit that never
// binds: in any one-second window the database's claim times hold at most rate + burst claims,
// and so do the pushes the task worker receives.
func TestTasksDispatchRate(t *testing.T) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStack(t, d)
			ts.startTaskWorker() // a second claimer sharing the queue's bucket
			token := ts.worker
			var mu sync.Mutex
			var pushed []time.Time
			w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
				mu.Lock()
				pushed = append(pushed, time.Now())
				mu.Unlock()
				w.letGo(p)
				if code := report(t, token, p, "success", 200, "done"); code != http.StatusAccepted {
					t.Errorf("result for %s: %d", p.TaskID, code)
				}
			})
			const n, rate, burst = 60, 10, 5
			q := map[string]any{"concurrency_limit": 100, "dispatch_rate_per_second": rate, "dispatch_burst": burst}
			ts.putQueue("metered", q)
			for i := range n {
				require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("m-%02d", i), 1, 1+i%5, "metered"))
			}
			q["push_url"] = w.url
			ts.putQueue("metered", q)
			var got api.Queue
			require.Equal(t, http.StatusOK, ts.call(http.MethodGet, "/v1/queues/metered", ts.admin, nil, &got))
			require.InDelta(t, rate, got.DispatchRate, 0)
			require.Equal(t, burst, got.DispatchBurst)

			var claimed []time.Time
			for i := range n {
				task := ts.waitStatus(fmt.Sprintf("m-%02d", i), 1, courier.TaskSuccess, 2*time.Minute)
				require.Equal(t, 1, task.Attempt)
				require.NotNil(t, task.ClaimedAt)
				claimed = append(claimed, *task.ClaimedAt)
			}
			slices.SortFunc(claimed, func(a, b time.Time) int { return a.Compare(b) })
			mu.Lock()
			slices.SortFunc(pushed, func(a, b time.Time) int { return a.Compare(b) })
			mu.Unlock()
			require.Len(t, pushed, n)
			mostClaims, mostPushes := mostInAnyWindow(claimed, time.Second), mostInAnyWindow(pushed, time.Second)
			t.Logf("most in any 1 s window: %d claims, %d pushes (rate %d, burst %d); %d pushes over %s",
				mostClaims, mostPushes, rate, burst, n, pushed[n-1].Sub(pushed[0]))
			require.LessOrEqual(t, mostClaims, rate+burst, "claims per second across both workers")
			require.LessOrEqual(t, mostPushes, rate+burst, "pushes per second across both workers")
		})
	}
}
