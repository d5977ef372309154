package store_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

// On PostgreSQL, Listen wakes its caller once LISTEN has taken effect and then on every
// notification: a committed outbox row, a redrive. On SQLite it never calls notify and its stop
// does nothing: callers poll.
func TestListen(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		s, _ := testenv.Store(t, "postgres")
		wakes := make(chan struct{}, 1)
		stop := s.Listen(t.Context(), store.OutboxChannel, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		}, nil)
		t.Cleanup(stop)
		woken := func(why string) {
			t.Helper()
			select {
			case <-wakes:
			case <-time.After(30 * time.Second):
				t.Fatalf("no wake-up: %s", why)
			}
		}
		woken("LISTEN took effect")
		ids := enqueue(t, s, outbox.Message{Topic: "orders.created", Payload: []byte(`{}`)})
		woken("a committed row")
		ok, err := s.MarkOutboxDead(t.Context(), ids[0], "no stream")
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.RedriveOutbox(t.Context(), ids[0])
		require.NoError(t, err)
		woken("a redrive")
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, _ := testenv.Store(t, "sqlite")
		var calls atomic.Int32
		stop := s.Listen(t.Context(), store.OutboxChannel, func() { calls.Add(1) }, nil)
		enqueue(t, s, outbox.Message{Topic: "orders.created", Payload: []byte(`{}`)})
		stop()
		require.Zero(t, calls.Load())
	})
}
