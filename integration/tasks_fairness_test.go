package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	cc "github.com/courier-oss/courier/client"
)

// fairBound is the fairness bound docs/flow-control.md states: while k keys have ready tasks in
// a band, a key with n of them has all of them claimed within the queue's first limit + k·n
// claims, whatever the other keys' backlogs.
func fairBound(limit, keys, n int) int { return limit + keys*n }

// TestTasksFairKeys: three tenants share a queue with limit 10 and a per-key limit of 6. The
// big one has 10,000 tasks ready, inserted first; then 100 and 10. FIFO would push the small
// ones after the 10,000. With keys taking turns they are claimed within their fair share
// (fairBound, asserted on the order the test task worker received the pushes, which is the
// claim order up to one claim's batch), the worker never holds more than 10 at once nor more
// than 6 of one key, and every task of the small keys succeeds at its first attempt, pushed
// once. The test ends when they have, with most of the big key's backlog still waiting.
func TestTasksFairKeys(t *testing.T) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) {
			eachModeSlow(t, d, func(t *testing.T, mode courier.DispatchMode) {
				ts := newTaskStackIn(t, d, mode)
				token := ts.worker
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					w.letGo(p)
					if code := report(t, token, p, "success", 200, "done"); code != http.StatusAccepted {
						t.Errorf("result for %s: %d", p.TaskID, code)
					}
				})
				const limit, perKey = 10, 6
				ts.putQueue("tenants", map[string]any{"concurrency_limit": limit, "per_key_limit": perKey})
				sizes := []struct {
					key string
					n   int
				}{{"big", 10000}, {"mid", 100}, {"small", 10}}
				ctx := t.Context()
				for i := range sizes[0].n { // the big backlog through the store, for speed
					_, _, err := ts.store.InsertTask(ctx, courier.TaskRequest{TaskID: fmt.Sprintf("big-%04d", i), Version: 1, Priority: 3,
						Queue: "tenants", ConcurrencyKey: "big", Payload: json.RawMessage(`{}`)})
					require.NoError(t, err)
				}
				for _, k := range sizes[1:] { // the others through the API
					for i := range k.n {
						var got api.Task
						require.Equal(t, http.StatusCreated, ts.call(http.MethodPost, "/v1/tasks", ts.producer, map[string]any{
							"task_id": fmt.Sprintf("%s-%04d", k.key, i), "task_version": 1, "queue": "tenants", "concurrency_key": k.key}, &got))
						require.Equal(t, k.key, got.ConcurrencyKey)
					}
				}
				producer, err := cc.New(ts.gw, cc.WithAPIKey(ts.producer))
				require.NoError(t, err)
				page, err := producer.ListTasks(ctx, cc.TaskQuery{Queue: "tenants", ConcurrencyKey: "small"})
				require.NoError(t, err)
				require.Len(t, page.Items, 10, "the list filters by key")
				for _, it := range page.Items {
					require.Equal(t, "small", it.ConcurrencyKey)
				}
				ts.putQueue("tenants", map[string]any{"concurrency_limit": limit, "per_key_limit": perKey, "push_url": w.url})

				small := func(key string) bool { return key == "mid" || key == "small" }
				require.Eventually(t, func() bool {
					n := 0
					for _, p := range w.pushOrder() {
						if small(p.ConcurrencyKey) {
							n++
						}
					}
					return n >= sizes[1].n+sizes[2].n
				}, 5*time.Minute, 250*time.Millisecond, "the small keys are pushed")
				for _, k := range sizes[1:] {
					for i := range k.n {
						ts.waitStatus(fmt.Sprintf("%s-%04d", k.key, i), 1, courier.TaskSuccess, time.Minute)
					}
				}
				require.LessOrEqual(t, w.maxConcurrent(), limit, "the queue's limit held")
				for key, most := range w.maxByKey() {
					require.LessOrEqual(t, most, perKey, "the per-key limit held for %s", key)
				}

				last := map[string]int{}
				pushes := map[string]int{}
				order := w.pushOrder()
				for i, p := range order {
					require.Equal(t, 1, p.Attempt)
					last[p.ConcurrencyKey] = i + 1
					pushes[p.TaskID]++
				}
				for id, n := range pushes {
					require.Equal(t, 1, n, "one push of %s", id)
				}
				t.Logf("last push of each key (of %d so far): %v", len(order), last)
				require.LessOrEqual(t, last["small"], fairBound(limit, 3, 10), "small is claimed within its fair share")
				require.LessOrEqual(t, last["mid"], fairBound(limit, 3, 100), "mid is claimed within its fair share")
				require.Equal(t, "mid", ts.get("mid-0000", 1).ConcurrencyKey, "GET returns the key")
			})
		})
	}
}
