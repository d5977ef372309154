package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// Bulk redrive: the filter picks dead records by topic pattern, dead time and id, without
// payloads, in bounded pages; the redrive moves only records still dead, in one statement.
func TestBulkRedrive(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		topics := []string{"orders.created", "orders.created.eu", "orders", "users.created", "orders.paid", "orders.created"}
		var msgs []outbox.Message
		for _, tp := range topics {
			msgs = append(msgs, outbox.Message{Topic: tp, Payload: []byte(`{}`)})
		}
		ids := enqueue(t, s, msgs...)
		for _, id := range ids[:5] { // the last orders.created stays pending
			ok, err := s.MarkOutboxDead(ctx, id, "no stream")
			require.NoError(t, err)
			require.True(t, ok)
		}
		refs := func(f courier.DeadFilter, limit int) []int64 {
			t.Helper()
			rs, err := s.DeadOutbox(ctx, f, limit)
			require.NoError(t, err)
			out := []int64{}
			for _, r := range rs {
				out = append(out, r.ID)
			}
			return out
		}
		require.Equal(t, ids[:5], refs(courier.DeadFilter{}, 100))
		require.Equal(t, []int64{ids[0], ids[4]}, refs(courier.DeadFilter{Topic: "orders.*"}, 100))
		require.Equal(t, []int64{ids[0], ids[1], ids[4]}, refs(courier.DeadFilter{Topic: "orders.>"}, 100))
		require.Equal(t, []int64{ids[0], ids[3]}, refs(courier.DeadFilter{Topic: "*.created"}, 100))
		require.Equal(t, []int64{ids[2]}, refs(courier.DeadFilter{Topic: "orders"}, 100))
		require.Equal(t, []int64{ids[0]}, refs(courier.DeadFilter{Topic: "orders.>"}, 1))
		require.Equal(t, []int64{ids[1], ids[4]}, refs(courier.DeadFilter{Topic: "orders.>", AfterID: ids[0]}, 100))
		hour := time.Hour
		require.Equal(t, ids[:5], refs(courier.DeadFilter{DeadSince: time.Now().Add(-hour), DeadBefore: time.Now().Add(hour)}, 100))
		require.Empty(t, refs(courier.DeadFilter{DeadSince: time.Now().Add(hour)}, 100))
		require.Empty(t, refs(courier.DeadFilter{DeadBefore: time.Now().Add(-hour)}, 100))

		// Only records still dead move: the pending one and an unknown id are left alone.
		n, err := s.RedriveDeadOutbox(ctx, []int64{ids[0], ids[4], ids[5], 999999})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		for _, id := range []int64{ids[0], ids[4], ids[5]} {
			rec, err := s.GetOutbox(ctx, id)
			require.NoError(t, err)
			require.Equal(t, courier.OutboxPending, rec.Status)
		}
		n, err = s.RedriveDeadOutbox(ctx, []int64{ids[0]})
		require.NoError(t, err)
		require.Zero(t, n, "a second redrive moves nothing")
		require.Equal(t, []int64{ids[1], ids[2], ids[3]}, refs(courier.DeadFilter{}, 100))
	})
}

// More dead rows than one scan page: the scan pages on, and a pattern matching few rows still
// finds them all.
func TestBulkRedriveScansPages(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		var msgs []outbox.Message
		for i := range 2500 {
			tp := "noise.a"
			if i%1000 == 999 {
				tp = "rare.a"
			}
			msgs = append(msgs, outbox.Message{Topic: tp, Payload: []byte(`1`)})
		}
		ids := enqueue(t, s, msgs...)
		for _, id := range ids {
			_, err := s.MarkOutboxDead(ctx, id, "x")
			require.NoError(t, err)
		}
		rs, err := s.DeadOutbox(ctx, courier.DeadFilter{Topic: "*.a"}, 10000)
		require.NoError(t, err)
		require.Len(t, rs, 2500)
		rs, err = s.DeadOutbox(ctx, courier.DeadFilter{Topic: "rare.*"}, 10)
		require.NoError(t, err)
		require.Len(t, rs, 2)
		require.Equal(t, ids[999], rs[0].ID)
		require.Equal(t, ids[1999], rs[1].ID)
	})
}
