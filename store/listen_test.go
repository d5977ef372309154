package store_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
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

// Claimers of other processes hear of claimable tasks on TasksChannel: an insert, a recorded
// success (its slot free) and released slot holds each wake a listener on another connection,
// sent once their transactions have committed (task_notify.go).
func TestTaskNotificationsAfterCommit(t *testing.T) {
	t.Parallel()
	s, dsn := testenv.Store(t, "postgres")
	other, err := store.Open(t.Context(), dsn) // another process's store
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	wakes := make(chan struct{}, 1)
	stop := other.Listen(t.Context(), store.TasksChannel, func() {
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
	ctx := t.Context()
	_, _, err = s.PutQueue(ctx, courier.Queue{Name: "heard", ConcurrencyLimit: 2})
	require.NoError(t, err)
	woken("a queue change")
	for i := range 2 {
		r := taskReq(fmt.Sprintf("n%d", i), 1, 3, `{}`)
		r.Queue = "heard"
		_, _, err := s.InsertTask(ctx, r)
		require.NoError(t, err)
		woken("an insert")
	}
	got, err := claimTasks(ctx, t, s, "heard", 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	woken("the push URL the claim's helper set")
	fr, err := s.FinishTaskAttempt(ctx, got[0].TaskID, 1, got[0].Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess})
	require.NoError(t, err)
	require.True(t, fr.Applied)
	woken("a success that freed its slot")
	fr, err = s.FinishReported(ctx, got[1].TaskID, 1, got[1].Attempt, contract.AttemptOutcome{Kind: courier.OutcomeSuccess}, "answer")
	require.NoError(t, err)
	require.True(t, fr.Applied)
	n, err := s.ReleaseSlotHolds(ctx, "answer")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	woken("released slot holds")
}
