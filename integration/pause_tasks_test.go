package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/worker"
)

// A paused task queue keeps its tasks pending: inserts are accepted, nothing is claimed or
// pushed (the claim itself reads the pause), the tasks say their queue is paused, and another
// queue keeps flowing. On resume the claimer is woken (its poll is an hour here, so only the
// wake can start it) and every held task is pushed once, at its first attempt. On both
// databases.
func TestPausedQueueHoldsTasks(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			eachMode(t, func(t *testing.T, mode courier.DispatchMode) {
				s := newStack(t, dialect)
				s.watchPauses()
				ts := taskStackOn(t, s, 5*time.Second, func(c *worker.Config) { c.Tasks.PollInterval = time.Hour })
				ts.mode = mode
				token := ts.worker
				w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
					w.letGo(p)
					if code := report(t, token, p, "success", 200, "done"); code != http.StatusAccepted {
						t.Errorf("result for %s: %d", p.TaskID, code)
					}
				})
				ts.putQueue("docs", map[string]any{"concurrency_limit": 5, "push_url": w.url})
				ts.putQueue("other", map[string]any{"concurrency_limit": 5, "push_url": w.url})

				var p api.Pause
				require.Equal(t, http.StatusCreated, ts.call(http.MethodPost, "/v1/pauses", ts.admin,
					map[string]any{"kind": "queue", "name": "docs", "reason": "worker fleet upgrade"}, &p))
				const n = 20
				for i := range n {
					require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("d-%02d", i), 1, 1+i%5, "docs"))
				}
				// Two tasks of another queue, the second inserted after the first was pushed: the
				// claim pass that takes the second began after the first's pass ended, so after every
				// task of docs was inserted, and it visited docs too.
				require.Equal(t, http.StatusCreated, ts.insert("o-1", 1, 3, "other"))
				ts.waitStatus("o-1", 1, courier.TaskSuccess, 30*time.Second)
				require.Equal(t, http.StatusCreated, ts.insert("o-2", 1, 3, "other"))
				ts.waitStatus("o-2", 1, courier.TaskSuccess, 30*time.Second)
				for _, pushed := range w.pushOrder() {
					require.Equal(t, "other", pushed.Queue, "a task of the paused queue was pushed: %s", pushed.TaskID)
				}
				got := ts.get("d-00", 1)
				require.Equal(t, courier.TaskPending, got.Status)
				require.Equal(t, 0, got.Attempts)
				require.NotNil(t, got.QueuePaused, "a pending task says its queue is paused")
				require.Equal(t, "worker fleet upgrade", got.QueuePaused.Reason)
				var page api.TaskPage
				require.Equal(t, http.StatusOK, ts.call(http.MethodGet, "/v1/tasks?queue=docs", ts.producer, nil, &page))
				require.Len(t, page.Items, n)
				for _, it := range page.Items {
					require.NotNil(t, it.QueuePaused, "%s in the list says its queue is paused", it.TaskID)
				}
				require.Equal(t, 0, ts.inFlight("docs"))

				require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/pauses/queue/docs", ts.admin, nil, nil))
				for i := range n {
					got := ts.waitStatus(fmt.Sprintf("d-%02d", i), 1, courier.TaskSuccess, time.Minute)
					require.Equal(t, 1, got.Attempt, "%s: its first attempt", got.TaskID)
					require.Nil(t, got.QueuePaused)
				}
				require.EqualValues(t, n+2, w.pushes.Load(), "one push per task")
				require.LessOrEqual(t, w.maxConcurrent(), 10, "each queue's limit held")
			})
		})
	}
}
