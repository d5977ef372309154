package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/store"
)

// The batched mode's statements: a claim names its batch on every attempt; the batch's push
// marks them pushed with their deadlines (kept on a repeat); many results are recorded at once
// (successes in one statement, a failure with its retry, a repeat and a stranger answered as
// one finish would); attempts past their timeout_at are timed out by the database's clock.
func TestBatchedStatements(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "bq", ConcurrencyLimit: 10, DispatchMode: courier.DispatchBatched,
			Retry: courier.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second}})
		require.NoError(t, err)
		for i := range 6 {
			r := taskReq(fmt.Sprintf("bt%d", i), 1, 3, `{"n":1}`)
			r.Queue = "bq"
			_, _, err := s.InsertTask(ctx, r)
			require.NoError(t, err)
		}
		c, err := claimReady(ctx, t, dispatch.New(), s, "bq", 10)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 6)
		require.Contains(t, c.Batch, "task-batch/bq/")
		var attempts []store.BatchAttempt
		for _, a := range c.Attempts {
			require.Equal(t, c.Batch, a.Batch)
			hb := time.Duration(0)
			if a.TaskID == "bt5" {
				hb = time.Second
			}
			attempts = append(attempts, store.BatchAttempt{TaskID: a.TaskID, Version: a.Version, Attempt: a.Attempt,
				ProcessingTimeout: time.Hour, HeartbeatTimeout: hb})
		}
		pushed, err := s.MarkBatchPushed(ctx, c.Batch, attempts)
		require.NoError(t, err)
		require.Len(t, pushed, 6)
		for _, p := range pushed {
			require.NotNil(t, p.DeadlineAt)
			require.JSONEq(t, `{"n":1}`, string(p.Payload))
			require.Equal(t, c.Batch, p.Batch)
		}
		again, err := s.MarkBatchPushed(ctx, c.Batch, attempts)
		require.NoError(t, err)
		require.Equal(t, *pushed[0].DeadlineAt, *again[0].DeadlineAt, "a repeated push keeps the deadline")
		none, err := s.MarkBatchPushed(ctx, "task-batch/bq/other", attempts)
		require.NoError(t, err)
		require.Empty(t, none, "only the batch that claimed them pushes them")

		frs, err := s.FinishReportedMany(ctx, []store.ReportedResult{
			{TaskID: "bt0", Version: 1, Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess, Result: []byte(`{"ok":true}`)}},
			{TaskID: "bt1", Version: 1, Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess, Message: "m"}},
			{TaskID: "bt2", Version: 1, Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 500}},
			{TaskID: "bt3", Version: 1, Attempt: 7, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}},
			{TaskID: "nope", Version: 1, Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}},
		}, "answer-a")
		require.NoError(t, err)
		require.True(t, frs[0].Applied)
		require.Equal(t, c.Batch, frs[0].Batch)
		require.True(t, frs[1].Applied)
		require.True(t, frs[2].Applied)
		require.Equal(t, courier.TaskPending, frs[2].Status, "a failure is retried")
		require.False(t, frs[3].Applied, "another attempt's result")
		require.Equal(t, courier.TaskProcessing, frs[3].Status)
		require.False(t, frs[4].Applied)
		require.Empty(t, frs[4].Status, "no such task")
		got, err := s.GetTask(ctx, "bt0", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskSuccess, got.Status)
		require.JSONEq(t, `{"ok":true}`, string(got.Result))
		repeat, err := s.FinishReportedMany(ctx, []store.ReportedResult{
			{TaskID: "bt0", Version: 1, Attempt: 1, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}}, "answer-b")
		require.NoError(t, err)
		require.False(t, repeat[0].Applied)
		require.True(t, repeat[0].Recorded, "a repeat finds its own success")
		q, err := s.GetQueue(ctx, "bq")
		require.NoError(t, err)
		require.Equal(t, 6, q.InFlight, "three results hold their slots until their answer is released")
		n, err := s.ReleaseSlotHolds(ctx, "answer-a")
		require.NoError(t, err)
		require.Equal(t, 3, n)

		// bt5's heartbeat timeout (1 s) passes; a heartbeat of bt4 (no heartbeat timeout)
		// changes nothing; nothing else is due for an hour.
		ok, _, err := s.BeatBatchedAttempt(ctx, "bt5", 1, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Eventually(t, func() bool {
			e, err := s.ExpireTimedOutAttempts(ctx, 10)
			require.NoError(t, err)
			return e.Attempts == 1
		}, 10*time.Second, 100*time.Millisecond)
		got, err = s.GetTask(ctx, "bt5", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, got.Status)
		require.Contains(t, got.Message, "heartbeat timeout")
		e, err := s.ExpireTimedOutAttempts(ctx, 10)
		require.NoError(t, err)
		require.Zero(t, e.Attempts, "the others' deadlines are an hour away")
		ok, status, err := s.BeatBatchedAttempt(ctx, "bt5", 1, 1)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, courier.TaskPending, status)
	})
}

// A batched attempt's heartbeat timeout runs from the worker's answer: its mark leaves the
// push's first try before it (nothing times out while courier pushes), StartBatchedHeartbeats
// starts it, and an attempt whose request is tried again in a run of its own moves to that
// run's batch (MoveBatchedAttempts), its deadline kept, the batch it left no longer pushing it.
func TestBatchedHeartbeatsAndHandOff(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "bh", ConcurrencyLimit: 10, DispatchMode: courier.DispatchBatched,
			Retry: courier.RetryPolicy{MaxAttempts: 3}})
		require.NoError(t, err)
		for _, id := range []string{"beat", "moved", "plain"} {
			r := taskReq(id, 1, 3, `{}`)
			r.Queue = "bh"
			_, _, err := s.InsertTask(ctx, r)
			require.NoError(t, err)
		}
		c, err := claimReady(ctx, t, dispatch.New(), s, "bh", 10)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 3)
		var attempts []store.BatchAttempt
		for _, a := range c.Attempts {
			hb := time.Second
			if a.TaskID == "plain" {
				hb = 0
			}
			attempts = append(attempts, store.BatchAttempt{TaskID: a.TaskID, Version: a.Version, Attempt: a.Attempt,
				ProcessingTimeout: time.Hour, HeartbeatTimeout: hb, Pushing: time.Hour})
		}
		pushed, err := s.MarkBatchPushed(ctx, c.Batch, attempts)
		require.NoError(t, err)
		require.Len(t, pushed, 3)
		time.Sleep(1500 * time.Millisecond) // past the heartbeat timeout, within the push's try
		e, err := s.ExpireTimedOutAttempts(ctx, 10)
		require.NoError(t, err)
		require.Zero(t, e.Attempts, "no heartbeat timeout runs while courier pushes")

		key := func(id string) store.AttemptKey { return store.AttemptKey{TaskID: id, Version: 1, Attempt: 1} }
		require.NoError(t, s.StartBatchedHeartbeats(ctx, []store.AttemptKey{key("beat"), key("plain")}, 0))
		to := c.Batch + ".0.try2"
		n, err := s.MoveBatchedAttempts(ctx, c.Batch, to, []store.AttemptKey{key("moved"), key("plain")}, time.Hour)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = s.MoveBatchedAttempts(ctx, c.Batch, to, []store.AttemptKey{key("moved")}, time.Hour)
		require.NoError(t, err)
		require.Zero(t, n, "moved once")
		again, err := s.MarkBatchPushed(ctx, c.Batch, attempts)
		require.NoError(t, err)
		require.Len(t, again, 1, "the batch they left no longer pushes them")
		require.Equal(t, "beat", again[0].TaskID)
		tries, err := s.MarkBatchPushed(ctx, to, attempts[:0:0])
		require.NoError(t, err)
		require.Empty(t, tries)
		var moved []store.BatchAttempt
		for _, a := range attempts {
			if a.TaskID != "beat" {
				moved = append(moved, a)
			}
		}
		tries, err = s.MarkBatchPushed(ctx, to, moved)
		require.NoError(t, err)
		require.Len(t, tries, 2, "the run of the tries pushes them")
		for _, tk := range tries {
			for _, p := range pushed {
				if p.TaskID == tk.TaskID {
					require.Equal(t, *p.DeadlineAt, *tk.DeadlineAt, "the deadline of the first try is kept")
				}
			}
		}

		require.Eventually(t, func() bool {
			e, err := s.ExpireTimedOutAttempts(ctx, 10)
			require.NoError(t, err)
			return e.Attempts == 1
		}, 10*time.Second, 100*time.Millisecond, "the started heartbeat timeout runs out")
		got, err := s.GetTask(ctx, "beat", 1)
		require.NoError(t, err)
		require.Contains(t, got.Message, "heartbeat timeout")
		for _, id := range []string{"moved", "plain"} {
			got, err := s.GetTask(ctx, id, 1)
			require.NoError(t, err)
			require.Equal(t, courier.TaskProcessing, got.Status, "%s: its wait and next try are still ahead", id)
			require.Equal(t, to, got.Batch)
		}
	})
}

// A claim says whether it drained its queue (every ready task taken, with slots to spare): the
// claimer then gathers a trickling batched queue for longer before its next pass. A claim the
// limit or its size cut short, or one that found nothing, did not.
func TestClaimDrained(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "drain", ConcurrencyLimit: 5, DispatchMode: courier.DispatchBatched})
		require.NoError(t, err)
		insert := func(ids ...string) {
			for _, id := range ids {
				r := taskReq(id, 1, 3, `{}`)
				r.Queue = "drain"
				_, _, err := s.InsertTask(ctx, r)
				require.NoError(t, err)
			}
		}
		d := dispatch.New()
		c, err := claimReady(ctx, t, d, s, "drain", 100)
		require.NoError(t, err)
		require.Empty(t, c.Attempts)
		require.False(t, c.Drained, "nothing was ready")

		insert("a", "b")
		c, err = claimReady(ctx, t, d, s, "drain", 100)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 2)
		require.True(t, c.Drained, "both ready tasks taken, three slots to spare")

		insert("c", "d", "e", "f")
		c, err = claimReady(ctx, t, d, s, "drain", 2)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 2)
		require.False(t, c.Drained, "the claim's size left ready tasks")
		c, err = claimReady(ctx, t, d, s, "drain", 100)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 1, "the limit")
		require.False(t, c.Drained, "the limit left a ready task")
	})
}
