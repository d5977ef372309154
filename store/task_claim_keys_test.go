package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/store"
)

func insertKeyed(t *testing.T, s *store.Store, queue, key string, n, prio int) {
	t.Helper()
	for i := range n {
		r := taskReq(fmt.Sprintf("%s-%s-%d-%d", queue, key, prio, i), 1, prio, `{}`)
		r.Queue, r.ConcurrencyKey = queue, key
		_, _, err := s.InsertTask(context.Background(), r)
		require.NoError(t, err)
	}
}

func byKey(got []dispatch.Attempt, s *store.Store, t *testing.T) map[string]int {
	out := map[string]int{}
	for _, c := range got {
		task, err := s.GetTask(context.Background(), c.TaskID, c.Version)
		require.NoError(t, err)
		out[task.ConcurrencyKey]++
	}
	return out
}

// A keyed queue hands its slots out key by key: every key with ready tasks gets a turn before
// any gets a second, a key at the per-key limit gets no more, a freed slot goes to the key
// holding fewest, the key is stored, returned and filtered on, and unkeyed tasks are one group.
func TestTaskClaimByKey(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "docs", ConcurrencyLimit: 10, PerKeyLimit: 6})
		require.NoError(t, err)
		insertKeyed(t, s, "docs", "big", 50, 3)
		insertKeyed(t, s, "docs", "mid", 5, 3)
		insertKeyed(t, s, "docs", "small", 2, 3)
		ch := dispatch.New()
		got, err := claimWith(ctx, t, ch, s, "docs", 100)
		require.NoError(t, err)
		require.Len(t, got, 10)
		require.Equal(t, map[string]int{"big": 4, "mid": 4, "small": 2}, byKey(got, s, t), "turns: big, mid, small, big, mid, small, big, mid, big, mid")

		// mid's and small's finish: 6 slots free; big holds 4, mid has 1 ready.
		for _, c := range got {
			task, _ := s.GetTask(ctx, c.TaskID, c.Version)
			if task.ConcurrencyKey != "big" {
				_, err := s.FinishTaskAttempt(ctx, c.TaskID, c.Version, c.Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
				require.NoError(t, err)
			}
		}
		next, err := claimWith(ctx, t, ch, s, "docs", 100)
		require.NoError(t, err)
		require.Equal(t, map[string]int{"big": 2, "mid": 1}, byKey(next, s, t), "big stops at the per-key limit")
		q, err := s.GetQueue(ctx, "docs")
		require.NoError(t, err)
		require.Equal(t, 7, q.InFlight, "3 slots stay free: only big has ready tasks, at its limit")

		list, _, err := s.ListTasks(ctx, courier.TaskFilter{Queue: "docs", ConcurrencyKey: "small"})
		require.NoError(t, err)
		require.Len(t, list, 2)
		for _, task := range list {
			require.Equal(t, "small", task.ConcurrencyKey)
		}
	})
}

// Keys do not change how the bands share the slots: a keyed queue claims the same number per
// band as an unkeyed one with the same backlog, and a band whose keys are all at their limit
// gives its share to the others.
func TestTaskClaimByKeyKeepsBandShares(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		bands := func(got []dispatch.Attempt) map[int]int {
			out := map[int]int{}
			for _, c := range got {
				out[c.Priority]++
			}
			return out
		}
		var counts []map[int]int
		for _, q := range []courier.Queue{{Name: "plain", ConcurrencyLimit: 20}, {Name: "keyed", ConcurrencyLimit: 20, FairKeys: true}} {
			_, _, err := s.PutQueue(ctx, q)
			require.NoError(t, err)
			for _, k := range []string{"x", "y"} {
				insertKeyed(t, s, q.Name, k, 20, 1)
				insertKeyed(t, s, q.Name, k, 20, 5)
			}
			got, err := claimTasks(ctx, t, s, q.Name, 100)
			require.NoError(t, err)
			require.Len(t, got, 20)
			counts = append(counts, bands(got))
		}
		require.Equal(t, counts[0], counts[1])

		// Band 1 holds only key "hot", already at its limit of 2: band 5's unkeyed tasks take
		// every other slot, band 1's share included.
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "spill", ConcurrencyLimit: 10, PerKeyLimit: 2})
		require.NoError(t, err)
		insertKeyed(t, s, "spill", "hot", 2, 1)
		got, err := claimTasks(ctx, t, s, "spill", 100)
		require.NoError(t, err)
		require.Len(t, got, 2)
		insertKeyed(t, s, "spill", "hot", 10, 1)
		insertKeyed(t, s, "spill", "", 10, 5)
		got, err = claimTasks(ctx, t, s, "spill", 100)
		require.NoError(t, err)
		require.Equal(t, map[int]int{5: 8}, bands(got), "the per-key limit holds hot; band 5 takes its share")
	})
}

// A queue's dispatch rate is a token bucket in the database: a claim takes at most what the
// bucket holds, says when the next token comes, and gives back what it did not use.
func TestTaskClaimDispatchRate(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "slow", ConcurrencyLimit: 50, DispatchRate: 0.01, DispatchBurst: 5})
		require.NoError(t, err)
		insertKeyed(t, s, "slow", "", 3, 3)
		c, err := claimReady(ctx, t, dispatch.New(), s, "slow", 100)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 3, "the bucket starts full (5)")
		require.Zero(t, c.NextToken, "nothing held back")
		insertKeyed(t, s, "slow", "more", 5, 3)
		c, err = claimReady(ctx, t, dispatch.New(), s, "slow", 100)
		require.NoError(t, err)
		require.Len(t, c.Attempts, 2, "what was left of the burst")
		require.Positive(t, c.NextToken, "the rest wait for tokens")
		c, err = claimReady(ctx, t, dispatch.New(), s, "slow", 100)
		require.NoError(t, err)
		require.Empty(t, c.Attempts)
		require.Positive(t, c.NextToken)
	})
}
