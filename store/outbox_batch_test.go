package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// A batch loads its rows in one query, marks the published ones sent in one statement (a second
// time is harmless), and a row handed to its own delivery is pending again with the attempt
// counted, which the next claim reports so the relay no longer batches it.
func TestOutboxBatchStatements(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		ids := enqueue(t, s, msg("a"), msg("b"), msg("c"), msg("d"))
		claimed, err := s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 4)
		for _, c := range claimed {
			require.Zero(t, c.Attempts, "a fresh row has no attempts")
		}

		recs, err := s.LoadOutboxBatch(ctx, []int64{ids[2], ids[0], 987654})
		require.NoError(t, err)
		require.Len(t, recs, 2, "an unknown id is left out")
		require.Equal(t, ids[0], recs[0].ID, "in id order")
		require.Equal(t, `{"a":1}`, string(recs[1].Payload), "with the payload")
		require.Equal(t, map[string]string{"h": "v"}, recs[1].Headers)

		n, err := s.MarkOutboxSentBatch(ctx, []int64{ids[0], ids[1]})
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		n, err = s.MarkOutboxSentBatch(ctx, []int64{ids[0], ids[1]})
		require.NoError(t, err)
		require.Zero(t, n, "a repeated batch marks nothing")
		rec, err := s.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxSent, rec.Status)
		require.Equal(t, 1, rec.Attempts)
		require.NotNil(t, rec.SentAt)

		ok, err := s.HandOutboxToRecord(ctx, ids[2], "mq: publish failed", 0)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.HandOutboxToRecord(ctx, ids[0], "late", 0)
		require.NoError(t, err)
		require.False(t, ok, "a sent row is never handed back")
		rec, err = s.GetOutbox(ctx, ids[2])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.Equal(t, "mq: publish failed", rec.LastError)

		ok, err = s.MarkOutboxDead(ctx, ids[3], "gone")
		require.NoError(t, err)
		require.True(t, ok)
		n, err = s.MarkOutboxSentBatch(ctx, []int64{ids[3]})
		require.NoError(t, err)
		require.Zero(t, n, "a dead row is never marked sent by a batch")

		claimed, err = s.ClaimOutbox(ctx, 10, time.Hour)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, ids[2], claimed[0].ID)
		require.Equal(t, 1, claimed[0].Attempts, "the claim reports the attempt")
	})
}
