package store_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// A record written under an idempotency key is written once: a repeat with the same request
// answers it, one with another request is a conflict, and concurrent requests with one key
// write one record between them.
func TestEnqueueOutboxOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		m := outbox.Message{Topic: "orders.created", Key: "o-1", Payload: []byte(`{"order":1}`)}
		first, created, err := s.EnqueueOutboxOnce(ctx, m, "req-1", "hash-a")
		require.NoError(t, err)
		require.True(t, created)
		again, created, err := s.EnqueueOutboxOnce(ctx, m, "req-1", "hash-a")
		require.NoError(t, err)
		require.False(t, created, "a repeat writes nothing")
		require.Equal(t, first.ID, again.ID)
		require.JSONEq(t, `{"order":1}`, string(again.Payload))

		_, _, err = s.EnqueueOutboxOnce(ctx, outbox.Message{Topic: "orders.created", Payload: []byte(`{"order":2}`)}, "req-1", "hash-b")
		require.Equal(t, courier.CodeConflict, courier.ErrorCode(err), "%v", err)

		var wg sync.WaitGroup
		ids := make([]int64, 20)
		errs := make([]error, 20)
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, _, err := s.EnqueueOutboxOnce(ctx, m, "req-2", "hash-a")
				ids[i], errs[i] = rec.ID, err
			}()
		}
		wg.Wait()
		for i := range ids {
			require.NoError(t, errs[i])
			require.Equal(t, ids[0], ids[i], "one record for one key")
		}
		n, err := s.DB().NewSelect().Table("courier_outbox").Where("topic = 'orders.created'").Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 2, n, "req-1 and req-2: two records")
	})
}
