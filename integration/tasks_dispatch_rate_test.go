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
// binds: in any one-second window the database's claim times hold at most rate + burst claims.
// The pushes the task worker receives follow their claims by the attempt's start latency, which
// varies from task to task by some spread: in any second they hold at most what the bucket
// allows over a second and that spread (rate × (1 s + spread) + burst).
func TestTasksDispatchRate(t *testing.T) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				ts.startTaskWorker() // a second claimer sharing the queue's bucket
				token := ts.worker
				var mu sync.Mutex
				pushedAt := map[string]time.Time{}
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					mu.Lock()
					pushedAt[p.TaskID] = time.Now()
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

				var claimed, pushed []time.Time
				var minLag, maxLag time.Duration
				for i := range n {
					id := fmt.Sprintf("m-%02d", i)
					task := ts.waitStatus(id, 1, courier.TaskSuccess, 2*time.Minute)
					require.Equal(t, 1, task.Attempt)
					require.NotNil(t, task.ClaimedAt)
					mu.Lock()
					at, ok := pushedAt[id]
					mu.Unlock()
					require.True(t, ok, "%s was pushed", id)
					lag := at.Sub(*task.ClaimedAt)
					if i == 0 || lag < minLag {
						minLag = lag
					}
					maxLag = max(maxLag, lag)
					claimed, pushed = append(claimed, *task.ClaimedAt), append(pushed, at)
				}
				byTime := func(a, b time.Time) int { return a.Compare(b) }
				slices.SortFunc(claimed, byTime)
				slices.SortFunc(pushed, byTime)
				spread := maxLag - minLag
				mostClaims, mostPushes := mostInAnyWindow(claimed, time.Second), mostInAnyWindow(pushed, time.Second)
				pushBound := int(float64(rate)*(1+spread.Seconds())) + burst
				t.Logf("most in any 1 s window: %d claims, %d pushes (rate %d, burst %d; claim-to-push spread %s, push bound %d); %d pushes over %s",
					mostClaims, mostPushes, rate, burst, spread, pushBound, n, pushed[n-1].Sub(pushed[0]))
				require.LessOrEqual(t, mostClaims, rate+burst, "claims per second across both workers")
				require.LessOrEqual(t, mostInAnyWindow(claimed, time.Second+spread), pushBound, "claims over a second and the spread")
				require.LessOrEqual(t, mostPushes, pushBound, "pushes per second across both workers")
			})
		})
	}
}
