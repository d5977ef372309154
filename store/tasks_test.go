package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/store"
)

func taskReq(id string, v int64, prio int, payload string) courier.TaskRequest {
	return courier.TaskRequest{TaskID: id, Version: v, Priority: prio, Payload: json.RawMessage(payload)}
}

// setStatus forces a task row into a status, as the lifecycle would leave it.
func setStatus(t *testing.T, s *store.Store, id string, v int64, status courier.TaskStatus) {
	t.Helper()
	_, err := s.DB().NewRaw("UPDATE courier_tasks SET status = ? WHERE task_id = ? AND version = ?", string(status), id, v).Exec(context.Background())
	require.NoError(t, err)
}

// claimTasks claims up to n of a queue's ready tasks by the dispatch rules, as a worker's
// claimer does.
func claimTasks(ctx context.Context, t testing.TB, s *store.Store, queue string, n int) ([]dispatch.Attempt, error) {
	return claimWith(ctx, t, dispatch.New(), s, queue, n)
}

// claimWith is claimTasks by d, which keeps the bands' weighted round between claims.
func claimWith(ctx context.Context, t testing.TB, d *dispatch.Dispatcher, s *store.Store, queue string, n int) ([]dispatch.Attempt, error) {
	c, err := claimReady(ctx, t, d, s, queue, n)
	return c.Attempts, err
}

// claimReady is claimWith's whole claim. A queue without a push URL claims nothing, so the
// queue gets one first (the store's tests never push).
func claimReady(ctx context.Context, t testing.TB, d *dispatch.Dispatcher, s *store.Store, queue string, n int) (dispatch.Claim, error) {
	t.Helper()
	q, err := s.GetQueue(ctx, queue)
	require.NoError(t, err)
	if q.PushURL == "" {
		q.PushURL = "http://127.0.0.1:9/push"
		_, _, err = s.PutQueue(ctx, q)
		require.NoError(t, err)
	}
	return d.Claim(ctx, s, queue, n)
}

// TestTaskVersionRules covers every existing status against a lower, the same and a higher
// requested version (DESIGN.md §3).
func TestTaskVersionRules(t *testing.T) {
	type want struct {
		code       courier.Code              // "" for success
		outcome    courier.TaskInsertOutcome // on success
		status     courier.TaskStatus        // the requested version's status afterwards
		oldStatus  courier.TaskStatus        // version 5's status afterwards
		curVersion int64                     // conflict detail
	}
	const lower, same, higher = 4, 5, 6
	cases := []struct {
		existing courier.TaskStatus
		request  int64
		samePay  bool
		want     want
	}{
		// A lower version than the one known is always stale.
		{courier.TaskPending, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskPending, curVersion: 5}},
		{courier.TaskProcessing, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskProcessing, curVersion: 5}},
		{courier.TaskSuccess, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskSuccess, curVersion: 5}},
		{courier.TaskFailed, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskFailed, curVersion: 5}},
		{courier.TaskStopped, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskStopped, curVersion: 5}},
		{courier.TaskCancelled, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskCancelled, curVersion: 5}},
		{courier.TaskSuperseded, lower, false, want{code: courier.CodeConflict, oldStatus: courier.TaskSuperseded, curVersion: 6}},
		// The same version: processing and success are returned unchanged; an identical pending
		// request is a repeat; anything else is replaced and pending again.
		{courier.TaskPending, same, true, want{outcome: courier.TaskExisting, status: courier.TaskPending, oldStatus: courier.TaskPending}},
		{courier.TaskPending, same, false, want{outcome: courier.TaskReplaced, status: courier.TaskPending, oldStatus: courier.TaskPending}},
		{courier.TaskProcessing, same, false, want{outcome: courier.TaskExisting, status: courier.TaskProcessing, oldStatus: courier.TaskProcessing}},
		{courier.TaskSuccess, same, false, want{outcome: courier.TaskExisting, status: courier.TaskSuccess, oldStatus: courier.TaskSuccess}},
		{courier.TaskFailed, same, false, want{outcome: courier.TaskReplaced, status: courier.TaskPending, oldStatus: courier.TaskPending}},
		{courier.TaskStopped, same, false, want{outcome: courier.TaskReplaced, status: courier.TaskPending, oldStatus: courier.TaskPending}},
		{courier.TaskCancelled, same, false, want{outcome: courier.TaskReplaced, status: courier.TaskPending, oldStatus: courier.TaskPending}},
		// A superseded version 5 implies version 6 exists: version 5 is stale.
		{courier.TaskSuperseded, same, false, want{code: courier.CodeConflict, oldStatus: courier.TaskSuperseded, curVersion: 6}},
		// A higher version is new; only a pending older one is superseded.
		{courier.TaskPending, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskSuperseded}},
		{courier.TaskProcessing, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskProcessing}},
		{courier.TaskSuccess, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskSuccess}},
		{courier.TaskFailed, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskFailed}},
		{courier.TaskStopped, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskStopped}},
		{courier.TaskCancelled, higher, false, want{outcome: courier.TaskCreated, status: courier.TaskPending, oldStatus: courier.TaskCancelled}},
	}
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for i, c := range cases {
			rel := map[int64]string{lower: "lower", same: "same", higher: "higher"}[c.request]
			t.Run(fmt.Sprintf("%s/%s", c.existing, rel), func(t *testing.T) {
				id := fmt.Sprintf("doc-%d", i)
				_, out, err := s.InsertTask(ctx, taskReq(id, 5, 2, `{"v":5}`))
				require.NoError(t, err)
				require.Equal(t, courier.TaskCreated, out)
				if c.existing == courier.TaskSuperseded {
					// The way a row becomes superseded: a newer version arrives while it waits.
					_, _, err := s.InsertTask(ctx, taskReq(id, 6, 2, `{"v":6}`))
					require.NoError(t, err)
					if c.request == higher {
						t.Skip("covered by the pending/higher case")
					}
				} else {
					setStatus(t, s, id, 5, c.existing)
				}
				payload := `{"v":"new"}`
				if c.samePay {
					payload = `{"v":5}`
				}
				got, outcome, err := s.InsertTask(ctx, taskReq(id, c.request, 2, payload))
				if c.want.code != "" {
					require.Error(t, err)
					require.Equal(t, c.want.code, courier.ErrorCode(err))
					var ce *courier.Error
					require.ErrorAs(t, err, &ce)
					require.EqualValues(t, c.want.curVersion, ce.Details["current_version"])
				} else {
					require.NoError(t, err)
					require.Equal(t, c.want.outcome, outcome)
					require.Equal(t, c.want.status, got.Status)
					require.Equal(t, c.request, got.Version)
					if outcome == courier.TaskExisting {
						require.JSONEq(t, `{"v":5}`, string(got.Payload), "an existing task comes back unchanged")
					} else {
						require.JSONEq(t, payload, string(got.Payload))
					}
				}
				old, err := s.GetTask(ctx, id, 5)
				require.NoError(t, err)
				require.Equal(t, c.want.oldStatus, old.Status)
			})
		}
	})
}

// The purge deletes old versions but keeps the row of each task id's highest version (payload
// and result cleared): a stale version stays refused, and a repeat of the highest version
// replaces that row with its attempt numbers still counting up, so a late result from its
// earlier life can never match.
func TestTaskHeadSurvivesPurge(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for v := int64(2); v <= 3; v++ {
			_, _, err := s.InsertTask(ctx, taskReq("d", v, 3, `{"big":"payload"}`))
			require.NoError(t, err)
		}
		claimed, err := claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1, "version 2 was superseded")
		fr, err := s.FinishTaskAttempt(ctx, "d", 3, 1, contract.AttemptOutcome{Kind: courier.OutcomeFailure, Result: json.RawMessage(`{"e":1}`)})
		require.NoError(t, err)
		require.True(t, fr.Applied)
		setStatus(t, s, "d", 3, courier.TaskFailed)
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET updated_at = '2000-01-01 00:00:00+00:00'").Exec(ctx)
		require.NoError(t, err)

		n, err := s.PurgeTasks(ctx, "default", time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "version 2 deleted, version 3 cleared")
		_, err = s.GetTask(ctx, "d", 2)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
		kept, err := s.GetLatestTask(ctx, "d")
		require.NoError(t, err)
		require.EqualValues(t, 3, kept.Version)
		require.Equal(t, courier.TaskFailed, kept.Status)
		require.JSONEq(t, `null`, string(kept.Payload))
		require.Nil(t, kept.Result)
		n, err = s.PurgeTasks(ctx, "default", time.Hour, 100)
		require.NoError(t, err)
		require.Zero(t, n, "nothing left to purge")

		_, _, err = s.InsertTask(ctx, taskReq("d", 2, 3, `{}`))
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "a stale version never comes back after a purge")
		head, err := s.TaskHead(ctx, "d")
		require.NoError(t, err)
		require.EqualValues(t, 3, head)

		again, out, err := s.InsertTask(ctx, taskReq("d", 3, 3, `{"second":"life"}`))
		require.NoError(t, err)
		require.Equal(t, courier.TaskReplaced, out)
		require.Equal(t, 0, again.Attempts, "a fresh retry budget")
		claimed, err = claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, 2, claimed[0].Attempt, "attempt numbers keep counting across lives")
		fr, err = s.FinishTaskAttempt(ctx, "d", 3, 1, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
		require.NoError(t, err)
		require.False(t, fr.Applied, "the first life's attempt cannot finish the second")
	})
}

func TestTaskInsertValidation(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for name, r := range map[string]courier.TaskRequest{
			"empty id": taskReq("", 1, 3, `{}`),
			"long id":  taskReq(string(make([]byte, 129)), 1, 3, `{}`),
			"NUL id":   taskReq("a\x00b", 1, 3, `{}`),
			"dot id":   taskReq("..", 1, 3, `{}`),
		} {
			_, _, err := s.InsertTask(ctx, r)
			require.Equal(t, courier.CodeInvalid, courier.ErrorCode(err), "%s breaks the id rule", name)
		}
		for name, r := range map[string]courier.TaskRequest{
			"version 0":     taskReq("a", 0, 3, `{}`),
			"priority 6":    taskReq("a", 1, 6, `{}`),
			"bad json":      taskReq("a", 1, 3, `{`),
			"unknown queue": {TaskID: "a", Version: 1, Queue: "nope"},
			"heartbeat above processing": {TaskID: "a", Version: 1, Overrides: courier.TaskOverrides{
				ProcessingTimeout: time.Minute, HeartbeatTimeout: 2 * time.Minute}},
			"huge pending timeout": {TaskID: "a", Version: 1, Overrides: courier.TaskOverrides{PendingTimeout: 400 * 24 * time.Hour}},
		} {
			_, _, err := s.InsertTask(ctx, r)
			require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), name)
		}
		n, err := s.DB().NewSelect().Table("courier_tasks").Count(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing half-written")
	})
}

func TestTaskConcurrentIdenticalInserts(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var wg sync.WaitGroup
		outcomes := make(chan courier.TaskInsertOutcome, 100)
		errs := make(chan error, 100)
		for i := 0; i < 100; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, out, err := s.InsertTask(ctx, taskReq("same", 1, 2, `{"file":"a.pdf"}`))
				if err != nil {
					errs <- err
					return
				}
				outcomes <- out
			}()
		}
		wg.Wait()
		close(outcomes)
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		created := 0
		for o := range outcomes {
			if o == courier.TaskCreated {
				created++
			} else {
				require.Equal(t, courier.TaskExisting, o)
			}
		}
		require.Equal(t, 1, created)
		n, err := s.DB().NewSelect().Table("courier_tasks").Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
	})
}

func TestTaskClaimLimitWeightsAndFinish(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q, _, err := s.PutQueue(ctx, courier.Queue{Name: "parse", ConcurrencyLimit: 4, Retry: courier.RetryPolicy{MaxAttempts: 2}})
		require.NoError(t, err)
		require.Equal(t, courier.DefaultBandWeights, q.Weights)
		for i := 0; i < 10; i++ {
			for p := 1; p <= 5; p++ {
				r := taskReq(fmt.Sprintf("t%d-p%d", i, p), int64(1+i%2), p, `{}`)
				r.Queue = "parse"
				_, _, err := s.InsertTask(ctx, r)
				require.NoError(t, err)
			}
		}
		ch := dispatch.New()
		got, err := claimWith(ctx, t, ch, s, "parse", 100)
		require.NoError(t, err)
		require.Len(t, got, 4, "never more than the limit")
		again, err := claimWith(ctx, t, ch, s, "parse", 100)
		require.NoError(t, err)
		require.Empty(t, again, "no free slot")
		q, err = s.GetQueue(ctx, "parse")
		require.NoError(t, err)
		require.Equal(t, 4, q.InFlight)
		for _, c := range got {
			require.Equal(t, 1, c.Attempt)
			require.Equal(t, 10*time.Minute, c.ProcessingTimeout)
		}
		// The first band's first pick is its highest version.
		require.Equal(t, 1, got[0].Priority)
		require.EqualValues(t, 2, got[0].Version)

		// Success releases a slot; a stale attempt changes nothing.
		fr, err := s.FinishTaskAttempt(ctx, got[0].TaskID, got[0].Version, 2, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
		require.NoError(t, err)
		require.False(t, fr.Applied, "wrong attempt")
		require.False(t, fr.Recorded, "wrong attempt")
		fr, err = s.FinishTaskAttempt(ctx, got[0].TaskID, got[0].Version, 1, contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`{"pages":3}`)})
		require.NoError(t, err)
		require.True(t, fr.Applied)
		require.True(t, fr.Recorded)
		require.Equal(t, courier.TaskSuccess, fr.Status)
		require.Equal(t, "parse", fr.Queue)
		// The same success from its second writer (the gateway, then the attempt's workflow):
		// recorded, written once, its slot released once (in_flight is checked below).
		fr, err = s.FinishTaskAttempt(ctx, got[0].TaskID, got[0].Version, 1, contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`{"pages":3}`)})
		require.NoError(t, err)
		require.False(t, fr.Applied, "written once")
		require.True(t, fr.Recorded, "the row holds this success")
		require.Equal(t, courier.TaskSuccess, fr.Status)
		fr, err = s.FinishTaskAttempt(ctx, got[0].TaskID, got[0].Version, 1, contract.AttemptOutcome{Kind: courier.OutcomeFailure})
		require.NoError(t, err)
		require.False(t, fr.Applied, "a finished task refuses a second result")
		require.False(t, fr.Recorded, "a failure is not the success the row holds")
		done, err := s.GetTask(ctx, got[0].TaskID, got[0].Version)
		require.NoError(t, err)
		require.Equal(t, courier.TaskSuccess, done.Status)
		require.JSONEq(t, `{"pages":3}`, string(done.Result))

		// Failure with attempts left → pending with a backoff, slot released.
		fr, err = s.FinishTaskAttempt(ctx, got[1].TaskID, got[1].Version, 1, contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: "corrupt"})
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, fr.Status)
		require.True(t, fr.NextAttemptAt.After(time.Now().Add(5*time.Second)), "waits for the backoff")
		// Cancel a processing task: slot released at once.
		c, wasProcessing, err := s.CancelTask(ctx, got[2].TaskID, got[2].Version)
		require.NoError(t, err)
		require.True(t, wasProcessing)
		require.Equal(t, courier.TaskCancelled, c.Status)
		fr, err = s.FinishTaskAttempt(ctx, got[2].TaskID, got[2].Version, 1, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
		require.NoError(t, err)
		require.False(t, fr.Applied, "a cancelled task refuses a late result")
		require.False(t, fr.Recorded, "a cancelled task does not hold a success")
		_, _, err = s.CancelTask(ctx, got[0].TaskID, got[0].Version)
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "a success cannot be cancelled")

		q, err = s.GetQueue(ctx, "parse")
		require.NoError(t, err)
		require.Equal(t, 1, q.InFlight)

		// The retried task comes back once due; then a second failure spends the budget.
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET next_attempt_at = '2000-01-01 00:00:00+00:00', priority = 1 WHERE task_id = ? AND version = ?",
			got[1].TaskID, got[1].Version).Exec(ctx)
		require.NoError(t, err)
		q.Weights = courier.BandWeights{100, 1, 1, 1, 1} // band 1, where the retried task now is, goes first
		_, _, err = s.PutQueue(ctx, q)
		require.NoError(t, err)
		next, err := claimTasks(ctx, t, s, "parse", 1)
		require.NoError(t, err)
		require.Len(t, next, 1)
		require.Equal(t, got[1].TaskID, next[0].TaskID)
		require.Equal(t, 2, next[0].Attempt)
		fr, err = s.FinishTaskAttempt(ctx, next[0].TaskID, next[0].Version, 2, contract.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: "processing timeout"})
		require.NoError(t, err)
		require.Equal(t, courier.TaskFailed, fr.Status)

		// The limiter count matches the rows; a corrupted count is repaired.
		repairs, err := s.ReconcileLimiters(ctx)
		require.NoError(t, err)
		require.Empty(t, repairs)
		_, err = s.DB().NewRaw("UPDATE courier_task_queues SET in_flight = 9 WHERE name = 'parse'").Exec(ctx)
		require.NoError(t, err)
		repairs, err = s.ReconcileLimiters(ctx)
		require.NoError(t, err)
		require.Equal(t, []store.LimiterRepair{{Queue: "parse", Recorded: 9, Counted: 1}}, repairs)

		st, err := s.TaskStats(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.ByQueueStatus["parse"][courier.TaskProcessing])
		require.EqualValues(t, 1, st.ByQueueStatus["parse"][courier.TaskFailed])
		require.EqualValues(t, 4, st.Limit["parse"])
	})
}

func TestTaskSweeperSteps(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, id := range []string{"p", "s", "f"} {
			_, _, err := s.InsertTask(ctx, taskReq(id, 1, 3, `{}`))
			require.NoError(t, err)
		}
		_, _, err := s.InsertTask(ctx, taskReq("f", 2, 3, `{}`)) // f/1 superseded, f/2 the head
		require.NoError(t, err)
		setStatus(t, s, "s", 1, courier.TaskSuccess)
		setStatus(t, s, "f", 1, courier.TaskFailed)
		old := "'2000-01-01 00:00:00+00:00'"
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET expires_at = " + old + ", finished_at = " + old + ", updated_at = " + old + " WHERE version = 1").Exec(ctx)
		require.NoError(t, err)

		// An expired pending task is never claimed, and the sweeper fails it.
		got, err := claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, got, 1, "only f/2 is due and not expired")
		require.Equal(t, "f", got[0].TaskID)

		n, err := s.ExpirePendingTasks(ctx, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		p, err := s.GetTask(ctx, "p", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskFailed, p.Status)
		require.Contains(t, p.Message, "pending timeout")

		n, err = s.StopSucceededTasks(ctx, "default", time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		st, err := s.GetTask(ctx, "s", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskStopped, st.Status)

		// Purge works in bounded batches; "p" failed and "s" stopped just now, so only the
		// superseded f/1 is old enough; f/2 is processing and the highest version anyway.
		n, err = s.PurgeTasks(ctx, "default", time.Hour, 100)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		_, err = s.GetTask(ctx, "f", 1)
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
		_, err = s.GetTask(ctx, "f", 2)
		require.NoError(t, err)

		// A purged row's late finish changes nothing and does not fail.
		fr, err := s.FinishTaskAttempt(ctx, "f", 1, 1, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
		require.NoError(t, err)
		require.False(t, fr.Applied)
	})
}

// TestTaskReplaceWaitsForClaim: on PostgreSQL a re-submission of a pending task that a claim is
// moving to Processing waits for the claim and then finds it processing, so the slot count and
// the rows stay in step (many rounds of a race).
func TestTaskReplaceRacingClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "race", ConcurrencyLimit: 1000})
		require.NoError(t, err)
		ch := dispatch.New()
		for round := 0; round < 30; round++ {
			id := fmt.Sprintf("r%d", round)
			r := taskReq(id, 1, 3, `{"n":0}`)
			r.Queue = "race"
			_, _, err := s.InsertTask(ctx, r)
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := claimWith(ctx, t, ch, s, "race", 10)
				require.NoError(t, err)
			}()
			go func() {
				defer wg.Done()
				r2 := r
				r2.Payload = json.RawMessage(`{"n":1}`)
				_, _, err := s.InsertTask(ctx, r2)
				require.NoError(t, err)
			}()
			wg.Wait()
		}
		repairs, err := s.ReconcileLimiters(ctx)
		require.NoError(t, err)
		require.Empty(t, repairs, "in_flight always matched the rows in Processing")
	})
}

// The sweeper's overdue list is ordered by each attempt's own deadline (the push plus its
// processing timeout), so a long attempt never hides a short one that is overdue.
func TestTaskOverdueByDeadline(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		for _, id := range []string{"long", "short"} {
			_, _, err := s.InsertTask(ctx, taskReq(id, 1, 3, `{}`))
			require.NoError(t, err)
		}
		claimed, err := claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		_, ok, err := s.MarkTaskPushed(ctx, "long", 1, 1, time.Hour, store.AttemptRun{})
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = s.MarkTaskPushed(ctx, "short", 1, 1, time.Second, store.AttemptRun{})
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = s.MarkTaskPushed(ctx, "short", 1, 2, time.Second, store.AttemptRun{})
		require.NoError(t, err)
		require.False(t, ok, "another attempt's push is stale")

		over, err := s.OverdueTasks(ctx, 0, 1)
		require.NoError(t, err)
		require.Empty(t, over, "nothing is past its deadline yet")
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET deadline_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'short'").Exec(ctx)
		require.NoError(t, err)
		over, err = s.OverdueTasks(ctx, time.Minute, 1)
		require.NoError(t, err)
		require.Len(t, over, 1)
		require.Equal(t, "short", over[0].TaskID)
		require.Equal(t, 1, over[0].Attempt)
	})
}

// Each attempt's push records the run it belongs to, guarded like the push itself; a cancel
// returns it (the run to cancel), and a new attempt or a re-submission starts without one, so
// an earlier attempt's run is never taken for the current one's.
func TestTaskRunIDRecordedByPush(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "default", PushURL: "https://worker.example.com/push", PushTimeout: 7 * time.Second})
		require.NoError(t, err)
		_, _, err = s.InsertTask(ctx, taskReq("doc", 1, 3, `{}`))
		require.NoError(t, err)
		claimed, err := claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, 7*time.Second, claimed[0].PushTimeout, "the claim carries the queue's push timeout")

		got, err := s.GetTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Empty(t, got.RunID, "no run before the push")
		target, ok, err := s.MarkTaskPushed(ctx, "doc", 1, 1, time.Minute, store.AttemptRun{ID: "run-a", HeartbeatTimeout: 1500 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "run-a", target.Task.RunID)
		require.Equal(t, 1500*time.Millisecond, target.Task.AttemptHeartbeatTimeout, "the push records the attempt's heartbeat timeout with it")
		require.NotNil(t, target.Task.PushedAt, "the target is the row as the push left it")
		require.Equal(t, "https://worker.example.com/push", target.Queue.PushURL, "the target carries its queue")
		require.Equal(t, 7*time.Second, target.Queue.PushTimeout)
		require.Equal(t, 1, target.Queue.InFlight)
		_, ok, err = s.MarkTaskPushed(ctx, "doc", 1, 2, time.Minute, store.AttemptRun{ID: "run-stale", HeartbeatTimeout: time.Second})
		require.NoError(t, err)
		require.False(t, ok)
		got, err = s.GetTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Equal(t, "run-a", got.RunID, "a stale attempt's push records nothing")

		cancelled, wasProcessing, err := s.CancelTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.True(t, wasProcessing)
		require.Equal(t, "run-a", cancelled.RunID, "the cancel names the run to cancel")

		_, outcome, err := s.InsertTask(ctx, taskReq("doc", 1, 3, `{"life":2}`))
		require.NoError(t, err)
		require.Equal(t, courier.TaskReplaced, outcome)
		got, err = s.GetTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Empty(t, got.RunID, "a re-submission forgets the old attempt's run")
		require.Zero(t, got.AttemptHeartbeatTimeout, "and its heartbeat timeout")

		_, err = claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		_, ok, err = s.MarkTaskPushed(ctx, "doc", 1, 2, time.Minute, store.AttemptRun{ID: "run-b"})
		require.NoError(t, err)
		require.True(t, ok)
		fr, err := s.FinishTaskAttempt(ctx, "doc", 1, 2, contract.AttemptOutcome{Kind: courier.OutcomeTimeout})
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, fr.Status)
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET next_attempt_at = '2000-01-01 00:00:00+00:00' WHERE task_id = 'doc'").Exec(ctx)
		require.NoError(t, err)
		claimed, err = claimTasks(ctx, t, s, "default", 10)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		got, err = s.GetTask(ctx, "doc", 1)
		require.NoError(t, err)
		require.Equal(t, 3, got.Attempt)
		require.Empty(t, got.RunID, "a retry's claim forgets the previous attempt's run")
	})
}

// A queue's push timeout defaults to 30 s and must be from 1 s to 10 min.
func TestQueuePushTimeout(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q, _, err := s.PutQueue(ctx, courier.Queue{Name: "pt"})
		require.NoError(t, err)
		require.Equal(t, courier.DefaultPushTimeout, q.PushTimeout)
		q, _, err = s.PutQueue(ctx, courier.Queue{Name: "pt", PushTimeout: 10 * time.Minute})
		require.NoError(t, err)
		require.Equal(t, 10*time.Minute, q.PushTimeout)
		for _, bad := range []time.Duration{time.Millisecond, 10*time.Minute + time.Second} {
			_, _, err = s.PutQueue(ctx, courier.Queue{Name: "pt", PushTimeout: bad})
			require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "%s", bad)
		}
	})
}

// The gateway and the attempt's workflow both record an accepted success, at the same moment:
// one writes it, both see it recorded, and the slot is released once.
func TestConcurrentSuccessIsRecordedOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const n = 20
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "default", ConcurrencyLimit: n})
		require.NoError(t, err)
		for i := range n {
			_, _, err := s.InsertTask(ctx, taskReq(fmt.Sprintf("twice-%d", i), 1, i%5+1, `{}`))
			require.NoError(t, err)
		}
		claimed, err := claimTasks(ctx, t, s, "default", n)
		require.NoError(t, err)
		require.Len(t, claimed, n)
		for _, c := range claimed {
			var (
				wg  sync.WaitGroup
				frs [2]store.FinishResult
			)
			for w := range frs {
				wg.Go(func() {
					fr, err := s.FinishTaskAttempt(ctx, c.TaskID, c.Version, c.Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage("null")})
					assert.NoError(t, err)
					frs[w] = fr
				})
			}
			wg.Wait()
			require.True(t, frs[0].Applied != frs[1].Applied, "exactly one writer applies it: %+v", frs)
			for _, fr := range frs {
				require.True(t, fr.Recorded)
				require.Equal(t, courier.TaskSuccess, fr.Status)
				require.Equal(t, "default", fr.Queue)
			}
			got, err := s.GetTask(ctx, c.TaskID, c.Version)
			require.NoError(t, err)
			require.Nil(t, got.Result, "a JSON null result is stored as none")
		}
		q, err := s.GetQueue(ctx, "default")
		require.NoError(t, err)
		require.Zero(t, q.InFlight, "each slot released once")
	})
}

// A task list pages newest first through every version the filter selects, without payloads,
// and a page boundary inside a run of versions created at the same instant loses none of them.
func TestTaskList(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "mail"}.WithDefaults())
		require.NoError(t, err)
		for i := range 25 {
			_, _, err := s.InsertTask(ctx, taskReq(fmt.Sprintf("t-%02d", i), 1, i%courier.MaxPriority+1, `{"big":true}`))
			require.NoError(t, err)
		}
		_, _, err = s.InsertTask(ctx, courier.TaskRequest{TaskID: "other", Version: 1, Queue: "mail", Payload: json.RawMessage(`1`)})
		require.NoError(t, err)
		// Five versions share one creation time: the order falls back to task id and version.
		_, err = s.DB().NewRaw("UPDATE courier_tasks SET created_at = (SELECT created_at FROM courier_tasks WHERE task_id = 't-10') WHERE task_id IN ('t-10', 't-11', 't-12', 't-13', 't-14')").Exec(ctx)
		require.NoError(t, err)
		setStatus(t, s, "t-03", 1, courier.TaskFailed)

		var seen []string
		f := courier.TaskFilter{Queue: courier.DefaultQueueName, Limit: 4}
		for page := 0; ; page++ {
			require.Less(t, page, 10, "the list ends")
			tasks, more, err := s.ListTasks(ctx, f)
			require.NoError(t, err)
			require.LessOrEqual(t, len(tasks), 4)
			for _, tk := range tasks {
				require.Nil(t, tk.Payload, "pages leave payloads out")
				seen = append(seen, tk.TaskID)
			}
			if !more {
				break
			}
			last := tasks[len(tasks)-1]
			f.After = &courier.TaskKey{CreatedAt: last.CreatedAt, TaskID: last.TaskID, Version: last.Version}
		}
		require.Len(t, seen, 25, "every version of the queue once: %v", seen)
		require.ElementsMatch(t, []string{"t-10", "t-11", "t-12", "t-13", "t-14"}, seen[slices.Index(seen, "t-14"):slices.Index(seen, "t-14")+5],
			"the versions created together come in a row, by task id descending")
		require.Equal(t, "t-24", seen[0], "newest first")

		failed, more, err := s.ListTasks(ctx, courier.TaskFilter{Status: courier.TaskFailed})
		require.NoError(t, err)
		require.False(t, more)
		require.Len(t, failed, 1)
		require.Equal(t, "t-03", failed[0].TaskID)

		high, _, err := s.ListTasks(ctx, courier.TaskFilter{Priority: 1, Queue: courier.DefaultQueueName})
		require.NoError(t, err)
		require.Len(t, high, 5)
		mail, _, err := s.ListTasks(ctx, courier.TaskFilter{Queue: "mail"})
		require.NoError(t, err)
		require.Len(t, mail, 1)

		all, _, err := s.ListTasks(ctx, courier.TaskFilter{Limit: 1000})
		require.NoError(t, err)
		require.Len(t, all, 26)
		cut := all[12].CreatedAt
		var older, newer int
		for _, tk := range all {
			if tk.CreatedAt.Before(cut) {
				older++
			} else {
				newer++
			}
		}
		before, _, err := s.ListTasks(ctx, courier.TaskFilter{CreatedBefore: cut, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, before, older, "created_before excludes its own instant")
		after, _, err := s.ListTasks(ctx, courier.TaskFilter{CreatedAfter: cut, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, after, newer, "created_after includes its own instant")
		none, _, err := s.ListTasks(ctx, courier.TaskFilter{CreatedAfter: all[0].CreatedAt.Add(time.Millisecond)})
		require.NoError(t, err)
		require.Empty(t, none)
	})
}
