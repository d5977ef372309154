package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/store"
)

func TestQueueBacklogs(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		start := time.Now().Add(-time.Minute)
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "idle"}.WithDefaults())
		require.NoError(t, err)
		bs, err := s.QueueBacklogs(ctx, start)
		require.NoError(t, err)
		require.Equal(t, []courier.QueueBacklog{{Queue: "default"}, {Queue: "idle"}}, bs, "configured queues without tasks are listed, empty, by name")

		for i, prio := range []int{1, 1, 3, 5, 5, 5} {
			_, _, err := s.InsertTask(ctx, taskReq("t"+string(rune('a'+i)), 1, prio, `{}`))
			require.NoError(t, err)
		}
		// One succeeds, one fails: they leave the backlog and count as finished.
		claimed, err := claimTasks(ctx, t, s, "default", 2)
		require.NoError(t, err)
		require.Len(t, claimed, 2)
		_, err = s.FinishTaskAttempt(ctx, claimed[0].TaskID, 1, claimed[0].Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
		require.NoError(t, err)
		setStatus(t, s, claimed[1].TaskID, 1, courier.TaskFailed)

		bs, err = s.QueueBacklogs(ctx, start)
		require.NoError(t, err)
		require.Len(t, bs, 2)
		require.Equal(t, "default", bs[0].Queue, "sorted by name")
		d := bs[0]
		require.Equal(t, int64(4), d.PendingTotal())
		var bands int64
		for _, n := range d.Pending {
			bands += n
		}
		require.Equal(t, d.PendingTotal(), bands)
		require.Equal(t, int64(3), d.Pending[4], "all three priority-5 tasks wait (the claim took the higher bands first)")
		require.Equal(t, int64(1), d.Succeeded)
		require.Equal(t, int64(1), d.Failed)
		require.WithinDuration(t, time.Now(), d.OldestPending, time.Minute)

		bs, err = s.QueueBacklogs(ctx, time.Now().Add(time.Hour))
		require.NoError(t, err)
		require.Zero(t, bs[0].Succeeded+bs[0].Failed, "nothing finished after the window's start")
	})
}

func TestOutboxOverview(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ov, err := s.OutboxOverview(ctx, 2)
		require.NoError(t, err)
		require.True(t, ov.OldestUnsent.IsZero())
		require.Empty(t, ov.DeadByTopic)

		ids := enqueue(t, s, msg("a.x"), msg("a.x"), msg("b.y"), msg("c.z"), msg("c.z"), msg("c.z"), msg("p.q"))
		for _, id := range ids[:6] {
			_, err := s.MarkOutboxDead(ctx, id, "no stream")
			require.NoError(t, err)
		}
		ov, err = s.OutboxOverview(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, int64(6), ov.ByStatus[courier.OutboxDead])
		require.Equal(t, int64(1), ov.ByStatus[courier.OutboxPending])
		require.False(t, ov.OldestUnsent.IsZero())
		require.Equal(t, []courier.TopicCount{{Topic: "c.z", Count: 3}, {Topic: "a.x", Count: 2}}, ov.DeadByTopic, "most first")
		require.True(t, ov.DeadTopicsMore, "b.y is left out")
	})
}
