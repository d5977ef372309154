package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
)

// The guarantees of tasks whose mechanism differs between the dispatch modes, each tested in
// both (docs/tasks.md, "Dispatch modes"); the other task tests run in both modes where theirs
// could differ too (eachMode, eachModeOn).

// attemptTimes records, per attempt of a task, when the test's worker saw it happen.
type attemptTimes struct {
	mu sync.Mutex
	at map[string]time.Time // "<task>/<attempt>/<what>" → when
}

func (a *attemptTimes) set(p api.TaskPush, what string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.at == nil {
		a.at = map[string]time.Time{}
	}
	a.at[fmt.Sprintf("%s/%d/%s", p.TaskID, p.Attempt, what)] = at
}

func (a *attemptTimes) get(t *testing.T, task string, attempt int, what string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.at[fmt.Sprintf("%s/%d/%s", task, attempt, what)]
	require.True(t, ok, "no %s of attempt %d of %s", what, attempt, task)
	return at
}

// TestTasksSilentWorkerTimesOut: a worker that goes silent after two heartbeats loses its
// attempt to the heartbeat timeout (1 s) no sooner than 1 s after its last heartbeat was sent
// and within the timeout plus 2 s of its answer; a worker that never reports loses it to the
// processing deadline (2 s), no sooner than the claim plus 2 s and within 2 s more of the
// push. Every attempt cut so is counted (max_attempts 2: the task fails after two, and says
// which timeout cut the last), and the worker was pushed each. In each mode: the per-attempt
// mode's timeouts are Temporal's, the batched mode's the claimers' pass over the rows.
func TestTasksSilentWorkerTimesOut(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		token := ts.worker
		var times attemptTimes
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
			times.set(p, "push", time.Now())
			if p.TaskID != "beats" {
				return // silent from the start
			}
			for range 2 {
				time.Sleep(300 * time.Millisecond) // work between heartbeats
				sent := time.Now()
				if code := heartbeat(t, token, p); code != http.StatusOK {
					t.Errorf("heartbeat of attempt %d: %d", p.Attempt, code)
				}
				times.set(p, "beat sent", sent)
				times.set(p, "beat answered", time.Now())
			}
		})
		retry := map[string]any{"max_attempts": 2, "initial_interval": "1s"}
		ts.putQueue("hb", map[string]any{"push_url": w.url, "heartbeat_timeout": "1s", "processing_timeout": "1m", "retry": retry})
		ts.putQueue("dl", map[string]any{"push_url": w.url, "processing_timeout": "2s", "retry": retry})
		require.Equal(t, http.StatusCreated, ts.insert("beats", 1, 3, "hb"))
		require.Equal(t, http.StatusCreated, ts.insert("quiet", 1, 3, "dl"))

		beats := ts.waitStatus("beats", 1, courier.TaskFailed, time.Minute)
		quiet := ts.waitStatus("quiet", 1, courier.TaskFailed, time.Minute)
		for _, got := range []api.Task{beats, quiet} {
			require.Equal(t, 2, got.Attempts, "%s: both attempts counted", got.TaskID)
			require.Equal(t, 2, got.Attempt, got.TaskID)
			require.NotNil(t, got.FinishedAt, got.TaskID)
			require.NotNil(t, got.ClaimedAt, got.TaskID)
		}
		require.Contains(t, beats.Message, "heartbeat timeout")
		require.Contains(t, quiet.Message, "processing timeout")
		for _, task := range []string{"beats", "quiet"} {
			for attempt := 1; attempt <= 2; attempt++ {
				times.get(t, task, attempt, "push")
			}
		}
		require.EqualValues(t, 4, w.pushes.Load(), "each attempt pushed once")

		end := *beats.FinishedAt
		sent, answered := times.get(t, "beats", 2, "beat sent"), times.get(t, "beats", 2, "beat answered")
		t.Logf("%s/%s: heartbeat timeout 1 s ended the attempt %s after its last heartbeat was answered", mode, d, end.Sub(answered))
		require.False(t, end.Before(sent.Add(time.Second)), "never early: the heartbeat timeout runs from the last heartbeat")
		require.False(t, end.After(answered.Add(3*time.Second)), "within the heartbeat timeout + 2 s")

		end = *quiet.FinishedAt
		pushed := times.get(t, "quiet", 2, "push")
		t.Logf("%s/%s: processing timeout 2 s ended the attempt %s after its push", mode, d, end.Sub(pushed))
		require.False(t, end.Before(quiet.ClaimedAt.Add(2*time.Second)), "never early: the deadline runs from the push, after the claim")
		require.False(t, end.After(pushed.Add(4*time.Second)), "within the processing timeout + 2 s")
		require.Equal(t, 0, ts.inFlight("hb"))
		require.Equal(t, 0, ts.inFlight("dl"))
	})
}

// TestTasksRetriesWithBackoff: a worker that fails every attempt sees attempt n+1 no sooner
// than initial_interval × backoff^(n−1) after it reported attempt n's failure (1 s, then 2 s),
// and the task fails after max_attempts (3), each attempt counted and pushed once, with the
// last failure's code and message.
func TestTasksRetriesWithBackoff(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		token := ts.worker
		var times attemptTimes
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
			times.set(p, "push", time.Now())
			times.set(p, "report sent", time.Now())
			if code := report(t, token, p, "failure", 503, fmt.Sprintf("attempt %d failed", p.Attempt)); code != http.StatusAccepted {
				t.Errorf("result of attempt %d: %d", p.Attempt, code)
			}
		})
		ts.putQueue("flaky", map[string]any{"push_url": w.url,
			"retry": map[string]any{"max_attempts": 3, "initial_interval": "1s", "backoff": 2, "max_interval": "1m"}})
		require.Equal(t, http.StatusCreated, ts.insert("again", 1, 3, "flaky"))
		got := ts.waitStatus("again", 1, courier.TaskFailed, time.Minute)
		require.Equal(t, 3, got.Attempts)
		require.Equal(t, 3, got.Attempt)
		require.Equal(t, 503, got.StatusCode)
		require.Equal(t, "attempt 3 failed", got.Message)
		require.EqualValues(t, 3, w.pushes.Load(), "one push per attempt")
		for n, wait := range []time.Duration{time.Second, 2 * time.Second} {
			gap := times.get(t, "again", n+2, "push").Sub(times.get(t, "again", n+1, "report sent"))
			t.Logf("%s/%s: attempt %d pushed %s after attempt %d failed (backoff %s)", mode, d, n+2, gap, n+1, wait)
			require.GreaterOrEqual(t, gap, wait, "attempt %d waits its backoff", n+2)
		}
		require.Equal(t, 0, ts.inFlight("flaky"))
	})
}

// TestTasksCancelledOrSupersededNeverPushed: a version superseded while pending, a pending task
// cancelled, and a task cancelled after its claim but before its push (the claimer died before
// starting it; in the batched mode its batch run then starts with every attempt of the claim,
// the cancelled one included) are never pushed; the rest of the claim is pushed and succeeds
// at its first attempt, and no slot stays taken.
func TestTasksCancelledOrSupersededNeverPushed(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		ctx := t.Context()
		token := ts.worker
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
			if code := report(t, token, p, "success", 200, "ok"); code != http.StatusAccepted {
				t.Errorf("result of %s: %d", p.TaskID, code)
			}
		})
		ts.putQueue("held", map[string]any{}) // no push_url yet: nothing is claimed
		require.Equal(t, http.StatusCreated, ts.insert("doc", 1, 1, "held"))
		require.Equal(t, http.StatusCreated, ts.insert("doc", 2, 1, "held"))
		require.Equal(t, courier.TaskSuperseded, ts.get("doc", 1).Status)
		require.Equal(t, http.StatusCreated, ts.insert("waiting", 1, 5, "held"))
		for i := range 4 {
			require.Equal(t, http.StatusCreated, ts.insert(fmt.Sprintf("c-%d", i), 1, 3, "held"))
		}
		// A claim of band 3 as the store runs it, by a claimer that dies before it starts the
		// attempts.
		batch := ""
		if mode == courier.DispatchBatched {
			batch = courier.TaskBatchWorkflowID("held", "died-"+d)
		}
		var claimed []courier.Task
		require.NoError(t, ts.store.RunClaim(ctx, "held", func(ctx context.Context, tx dispatch.ClaimTx) error {
			var err error
			if claimed, err = tx.ClaimBand(ctx, 3, 10, batch); err != nil {
				return err
			}
			return tx.AddInFlight(ctx, len(claimed))
		}))
		require.Len(t, claimed, 4)
		var cancelled api.Task
		require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/c-1/versions/1", ts.producer, nil, &cancelled))
		require.Equal(t, courier.TaskCancelled, cancelled.Status)
		require.Equal(t, http.StatusOK, ts.call(http.MethodDelete, "/v1/tasks/waiting/versions/1", ts.producer, nil, &cancelled))
		require.Equal(t, 3, ts.inFlight("held"), "the cancel freed the claimed attempt's slot")

		ts.putQueue("held", map[string]any{"push_url": w.url})
		if mode == courier.DispatchBatched {
			// The batch run the dead claimer would have started, with the whole claim.
			p := contract.PushBatchParams{Queue: "held", Batch: batch, PushBatchSize: 1}
			for _, c := range claimed {
				p.Attempts = append(p.Attempts, contract.BatchAttempt{TaskID: c.TaskID, Version: c.Version, Attempt: c.Attempt,
					ProcessingTimeout: time.Minute})
			}
			_, err := ts.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: batch,
				TaskQueue: courier.KindTaskBatch.TaskQueue(relay.DefaultTaskQueue)}, courier.KindTaskBatch.Workflow, p)
			require.NoError(t, err)
		}
		for _, id := range []string{"c-0", "c-2", "c-3"} {
			require.Equal(t, 1, ts.waitStatus(id, 1, courier.TaskSuccess, time.Minute).Attempt, id)
		}
		require.Equal(t, 1, ts.waitStatus("doc", 2, courier.TaskSuccess, time.Minute).Attempt)
		if mode == courier.DispatchBatched {
			require.Eventually(t, func() bool {
				desc, err := ts.tc.DescribeWorkflowExecution(ctx, batch, "")
				return err == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
			}, 30*time.Second, 50*time.Millisecond, "the dead claimer's batch run ends")
		}
		var pushed []string
		for _, p := range w.pushOrder() {
			pushed = append(pushed, fmt.Sprintf("%s/%d", p.TaskID, p.TaskVersion))
		}
		require.ElementsMatch(t, []string{"c-0/1", "c-2/1", "c-3/1", "doc/2"}, pushed, "nothing superseded or cancelled was pushed")
		require.Equal(t, courier.TaskCancelled, ts.get("c-1", 1).Status)
		require.Equal(t, courier.TaskSuperseded, ts.get("doc", 1).Status)
		require.Equal(t, 0, ts.inFlight("held"))
	})
}

// TestBatchedFailedPushLeavesItsBatch: in a batch of single pushes, the worker refuses one
// attempt (422) and cannot take another (a 503 on every try of its first attempt). The refused
// one ends as a failure at once; the other's request leaves the batch after its first try for
// a run of its own that makes its next tries (as many as one push makes, each after its
// wait), so the batch's run ends without waiting for them; the batch's other attempts are
// pushed once and succeed at their first attempt. Both come back in later batches, after the
// queue's backoff, and succeed at their second attempt.
func TestBatchedFailedPushLeavesItsBatch(t *testing.T) {
	for _, d := range []string{"sqlite", "postgres"} {
		t.Run(d, func(t *testing.T) {
			ts := newTaskStackIn(t, d, courier.DispatchBatched)
			token := ts.worker
			var mu sync.Mutex
			tries := map[string]int{}
			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			srv := startHTTP(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				var p api.TaskPush
				if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
					http.Error(rw, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				tries[fmt.Sprintf("%s/%d", p.TaskID, p.Attempt)]++
				mu.Unlock()
				switch {
				case p.TaskID == "refused" && p.Attempt == 1:
					http.Error(rw, "not a PDF", http.StatusUnprocessableEntity)
				case p.TaskID == "down" && p.Attempt == 1:
					http.Error(rw, "restarting", http.StatusServiceUnavailable)
				default:
					wg.Add(1)
					go func() {
						defer wg.Done()
						if code := report(t, token, p, "success", 200, "ok"); code != http.StatusAccepted {
							t.Errorf("result of %s: %d", p.TaskID, code)
						}
					}()
					rw.WriteHeader(http.StatusAccepted)
				}
			}))
			ts.putQueue("mixed", map[string]any{"concurrency_limit": 20, "retry": map[string]any{"initial_interval": "1s"}})
			ids := []string{"refused", "down"}
			for i := range 8 {
				ids = append(ids, fmt.Sprintf("ok-%d", i))
			}
			for _, id := range ids {
				require.Equal(t, http.StatusCreated, ts.insert(id, 1, 3, "mixed"))
			}
			ts.putQueue("mixed", map[string]any{"concurrency_limit": 20, "retry": map[string]any{"initial_interval": "1s"}, "push_url": srv})
			for _, id := range ids {
				got := ts.waitStatus(id, 1, courier.TaskSuccess, time.Minute)
				want := 1
				if !strings.HasPrefix(id, "ok-") {
					want = 2
				}
				require.Equal(t, want, got.Attempt, id)
				require.Equal(t, want, got.Attempts, id)
			}
			first := ts.get("ok-0", 1).WorkflowID
			for _, id := range ids[2:] {
				require.Equal(t, first, ts.get(id, 1).WorkflowID, "one claim, one batch")
			}
			for _, id := range ids[:2] {
				require.NotEqual(t, first, ts.get(id, 1).WorkflowID, "%s's second attempt came in a batch of its own", id)
			}
			mu.Lock()
			t.Logf("%s: tries per attempt %v", d, tries)
			require.Equal(t, 1, tries["refused/1"], "a refused push is not tried again")
			require.Equal(t, courier.PushTries, tries["down/1"], "a push that fails on the way is tried as one push is")
			mu.Unlock()
			var res contract.PushBatchResult
			require.NoError(t, ts.tc.GetWorkflow(t.Context(), first, "").Get(t.Context(), &res))
			require.Equal(t, contract.PushBatchResult{Pushed: 8, Failed: 1, Handed: 1}, res,
				"the batch's run ended the refused attempt and handed the one that failed on the way to a run of its tries")
			require.Equal(t, 0, ts.inFlight("mixed"))
		})
	}
}

// sampleCount is how many observations a histogram holds.
func sampleCount(t *testing.T, m prometheus.Metric) uint64 {
	var pb dto.Metric
	require.NoError(t, m.Write(&pb))
	return pb.GetHistogram().GetSampleCount()
}

// TestTaskMetrics: the task metrics count what happened, whichever mode ran it: one result per
// finished attempt by its outcome (a success and a failure reported by the worker, a timeout
// by the processing deadline), an insert→push per task's first push, and a push→result per
// reported result.
func TestTaskMetrics(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		m := metrics.NewTasks(prometheus.NewRegistry())
		ts := taskStackWith(t, &taskStack{stack: newStack(t, d), recoverAfter: 5 * time.Second, mode: mode, metrics: m})
		token := ts.worker
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) {
			switch p.TaskID {
			case "ok":
				report(t, token, p, "success", 200, "done")
			case "bad":
				report(t, token, p, "failure", 422, "not a PDF")
			} // "quiet" never reports
		})
		ts.putQueue("counted", map[string]any{"push_url": w.url, "processing_timeout": "2s", "retry": map[string]any{"max_attempts": 1}})
		for _, id := range []string{"ok", "bad", "quiet"} {
			require.Equal(t, http.StatusCreated, ts.insert(id, 1, 3, "counted"))
		}
		ts.waitStatus("ok", 1, courier.TaskSuccess, time.Minute)
		ts.waitStatus("bad", 1, courier.TaskFailed, time.Minute)
		ts.waitStatus("quiet", 1, courier.TaskFailed, time.Minute)
		results := func(outcome courier.OutcomeKind) float64 {
			return value(m.Results.WithLabelValues("counted", string(outcome)))
		}
		require.Eventually(t, func() bool {
			return results(courier.OutcomeSuccess) == 1 && results(courier.OutcomeFailure) == 1 && results(courier.OutcomeTimeout) == 1
		}, 10*time.Second, 20*time.Millisecond, "one result per outcome: success %v, failure %v, timeout %v",
			results(courier.OutcomeSuccess), results(courier.OutcomeFailure), results(courier.OutcomeTimeout))
		require.EqualValues(t, 3, sampleCount(t, m.InsertToPush.WithLabelValues("counted").(prometheus.Histogram)), "insert→push, once per task")
		require.EqualValues(t, 2, sampleCount(t, m.PushToResult.WithLabelValues("counted").(prometheus.Histogram)), "push→result, once per reported result")
		require.EqualValues(t, 3, w.pushes.Load())
	})
}

// TestTaskRetention: whichever mode ran them, successes kept past their queue's
// success_retention become Stopped, and stopped rows past purge_age are deleted but for the
// task's highest version, whose row stays, emptied, so a stale version can never come back.
func TestTaskRetention(t *testing.T) {
	eachModeOn(t, func(t *testing.T, d string, mode courier.DispatchMode) {
		ts := newTaskStackIn(t, d, mode)
		ctx := t.Context()
		token := ts.worker
		w := startTaskWorker(t, func(w *taskWorker, p api.TaskPush) { report(t, token, p, "success", 200, "done") })
		ts.putQueue("kept", map[string]any{"push_url": w.url, "success_retention": "1m", "purge_age": "1m"})
		for v := int64(1); v <= 2; v++ {
			require.Equal(t, http.StatusCreated, ts.insert("doc", v, 3, "kept"))
			ts.waitStatus("doc", v, courier.TaskSuccess, time.Minute)
		}
		// As if the retention had passed.
		_, err := ts.store.DB().NewRaw("UPDATE courier_tasks SET finished_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'doc'").Exec(ctx)
		require.NoError(t, err)
		require.NoError(t, tasks.EnsureSweeper(ctx, ts.tc, relay.DefaultTaskQueue, 200*time.Millisecond))
		ts.waitStatus("doc", 1, courier.TaskStopped, time.Minute)
		ts.waitStatus("doc", 2, courier.TaskStopped, time.Minute)
		// As if the purge age had passed too.
		_, err = ts.store.DB().NewRaw("UPDATE courier_tasks SET updated_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'doc'").Exec(ctx)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return ts.call(http.MethodGet, "/v1/tasks/doc/versions/1", ts.producer, nil, nil) == http.StatusNotFound
		}, time.Minute, 100*time.Millisecond, "the lower version is deleted")
		require.Eventually(t, func() bool { return len(ts.get("doc", 2).Result) == 0 }, time.Minute, 100*time.Millisecond,
			"the highest version's row stays, emptied")
		require.Equal(t, courier.TaskStopped, ts.get("doc", 2).Status)
		require.Equal(t, http.StatusConflict, ts.insert("doc", 1, 3, "kept"), "a stale version never comes back")
	})
}
