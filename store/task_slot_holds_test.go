package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/store"
)

// A worker's result frees its slot only when the result is released (after the worker's
// answer); until then a claim finds the queue full. A release no answer ever follows is done
// by the grace, and the limiter's reconcile counts held slots with the rows in Processing.
func TestResultSlotsAreHeldUntilReleased(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "held", ConcurrencyLimit: 2, Retry: courier.RetryPolicy{MaxAttempts: 3, InitialInterval: time.Second}})
		require.NoError(t, err)
		for i := range 4 {
			r := taskReq(fmt.Sprintf("h%d", i), 1, 3, `{}`)
			r.Queue = "held"
			_, _, err := s.InsertTask(ctx, r)
			require.NoError(t, err)
		}
		got, err := claimTasks(ctx, t, s, "held", 10)
		require.NoError(t, err)
		require.Len(t, got, 2)
		inFlight := func() int {
			q, err := s.GetQueue(ctx, "held")
			require.NoError(t, err)
			return q.InFlight
		}

		// A success and a failure reported by the worker: both recorded, both slots held.
		fr, err := s.FinishReported(ctx, got[0].TaskID, 1, got[0].Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess}, "answer-1")
		require.NoError(t, err)
		require.True(t, fr.Applied)
		require.Equal(t, courier.TaskSuccess, fr.Status)
		fr, err = s.FinishReported(ctx, got[1].TaskID, 1, got[1].Attempt, contract.AttemptOutcome{Kind: courier.OutcomeFailure}, "answer-2")
		require.NoError(t, err)
		require.Equal(t, courier.TaskPending, fr.Status)
		require.Equal(t, 2, inFlight(), "both slots held until their answers are written")
		none, err := claimTasks(ctx, t, s, "held", 10)
		require.NoError(t, err)
		require.Empty(t, none, "a held slot is not handed out")
		repairs, err := s.ReconcileLimiters(ctx)
		require.NoError(t, err)
		require.Empty(t, repairs, "held slots count as slots in use")

		// The answer to the success was written: its slot goes back, once.
		n, err := s.ReleaseSlotHolds(ctx, "answer-1")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = s.ReleaseSlotHolds(ctx, "answer-1")
		require.NoError(t, err)
		require.Zero(t, n, "a release is done once")
		require.Equal(t, 1, inFlight())
		next, err := claimTasks(ctx, t, s, "held", 10)
		require.NoError(t, err)
		require.Len(t, next, 1, "the released slot is handed out")

		// The failure's answer never came: the grace releases it.
		n, err = s.ReleaseStaleSlotHolds(ctx, time.Hour)
		require.NoError(t, err)
		require.Zero(t, n, "not stale yet")
		n, err = s.ReleaseStaleSlotHolds(ctx, -time.Second)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, inFlight(), "the claimed task holds the other")
		repairs, err = s.ReconcileLimiters(ctx)
		require.NoError(t, err)
		require.Empty(t, repairs)
	})
}
