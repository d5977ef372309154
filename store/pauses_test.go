package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// A pause is stored once: a second pause of the same thing keeps the first one's reason, author
// and time; resume removes it and says not_found when there is none; a bad kind, name or reason
// writes nothing.
func TestPauses(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		p, created, err := s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs", Reason: "maintenance", PausedBy: "api key ops (k1)"})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, "maintenance", p.Reason)
		require.WithinDuration(t, time.Now(), p.PausedAt, time.Minute)
		again, created, err := s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs", Reason: "other", PausedBy: "someone else"})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, p, again, "the pause in force is unchanged")

		_, _, err = s.Pause(ctx, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>"})
		require.NoError(t, err)
		_, _, err = s.Pause(ctx, courier.Pause{Kind: courier.PauseBizType, Name: "order.close"})
		require.NoError(t, err)
		for _, bad := range []courier.Pause{{Kind: "tenant", Name: "x"}, {Kind: courier.PauseQueue, Name: "Not A Name"},
			{Kind: courier.PauseTopic, Name: "orders.>.x"}, {Kind: courier.PauseQueue, Name: "q", Reason: "a\x00b"}} {
			_, _, err := s.Pause(ctx, bad)
			require.Error(t, err, "%+v", bad)
		}
		list, err := s.ListPauses(ctx)
		require.NoError(t, err)
		require.Len(t, list, 3)
		ps := courier.NewPauses(list)
		_, ok := ps.Queue("docs")
		require.True(t, ok)
		_, ok = ps.BizType("order.close")
		require.True(t, ok)
		got, ok := ps.Topic("orders.created.eu")
		require.True(t, ok)
		require.Equal(t, "orders.>", got.Name)
		_, ok = ps.Topic("orders")
		require.False(t, ok, "orders.> needs a token after orders")

		gone, err := s.Resume(ctx, courier.PauseQueue, "docs")
		require.NoError(t, err)
		require.Equal(t, p, gone)
		_, err = s.Resume(ctx, courier.PauseQueue, "docs")
		var ce *courier.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, courier.CodeNotFound, ce.Code)
		list, err = s.ListPauses(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
	})
}

// Every pause and resume that commits is counted, and only those: a reader that finds the list
// as it was still learns that a pause came and went since its last read (pauses.Watcher).
func TestPauseChangesAreCounted(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		list, changes, err := s.ReadPauses(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		require.Zero(t, changes)

		_, created, err := s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs"})
		require.NoError(t, err)
		require.True(t, created)
		_, created, err = s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs"})
		require.NoError(t, err)
		require.False(t, created)
		_, _, err = s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "Not A Name"})
		require.Error(t, err)
		list, changes, err = s.ReadPauses(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.EqualValues(t, 1, changes, "a repeated or refused pause changes nothing")

		_, err = s.Resume(ctx, courier.PauseQueue, "docs")
		require.NoError(t, err)
		_, err = s.Resume(ctx, courier.PauseQueue, "docs")
		require.Error(t, err)
		list, changes, err = s.ReadPauses(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "the list is as it was before the pause")
		require.EqualValues(t, 2, changes, "but the pause and its resume are counted")
	})
}

// On PostgreSQL a pause and a resume are announced at their commit, so a listening worker sees
// them at once.
func TestPausesAreNotified(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		if !s.IsPostgres() {
			t.Skip("SQLite has no notifications: workers read the pauses every second")
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		got := make(chan struct{}, 10)
		stop := s.Listen(ctx, store.PausesChannel, func() {
			select {
			case got <- struct{}{}:
			default:
			}
		}, nil)
		defer stop()
		<-got // LISTEN has taken effect
		_, _, err := s.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs"})
		require.NoError(t, err)
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no notification of the pause")
		}
		_, err = s.Resume(ctx, courier.PauseQueue, "docs")
		require.NoError(t, err)
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no notification of the resume")
		}
	})
}
