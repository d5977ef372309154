package pauses_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/pauses"
)

// fakeStore keeps pauses in memory and counts their changes; fail makes reads fail, and failed
// counts the reads that failed.
type fakeStore struct {
	mu      sync.Mutex
	list    []courier.Pause
	changes int64
	fail    bool
	failed  int
}

func (f *fakeStore) Pause(_ context.Context, p courier.Pause) (courier.Pause, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.list {
		if x.Kind == p.Kind && x.Name == p.Name {
			return x, false, nil
		}
	}
	p.PausedAt = time.Now()
	f.list = append(f.list, p)
	f.changes++
	return p, true, nil
}

func (f *fakeStore) Resume(_ context.Context, kind courier.PauseKind, name string) (courier.Pause, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.list {
		if x.Kind == kind && x.Name == name {
			f.list = append(f.list[:i], f.list[i+1:]...)
			f.changes++
			return x, nil
		}
	}
	return courier.Pause{}, &courier.Error{Code: courier.CodeNotFound}
}

func (f *fakeStore) ListPauses(ctx context.Context) ([]courier.Pause, error) {
	list, _, err := f.ReadPauses(ctx)
	return list, err
}

func (f *fakeStore) ReadPauses(context.Context) ([]courier.Pause, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		f.failed++
		return nil, 0, errors.New("database down")
	}
	return append([]courier.Pause(nil), f.list...), f.changes, nil
}

// A watcher has the pauses before Start returns, sees a change made through the service at
// once when kicked (as the service's OnChange does), tells its OnChange subscribers of the
// change, and keeps the last pauses it read while the database cannot be read.
func TestWatcherFollowsTheService(t *testing.T) {
	st := &fakeStore{}
	ctx := t.Context()
	svc := pauses.NewService(st, slog.New(slog.DiscardHandler))
	_, _, err := svc.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "docs"})
	require.NoError(t, err)

	w := pauses.NewWatcher(st, time.Hour, slog.New(slog.DiscardHandler)) // only kicks make it read
	changes := make(chan courier.Pauses, 10)
	w.OnChange(func(_, after courier.Pauses) { changes <- after })
	require.NoError(t, w.Start(ctx))
	_, ok := w.Current().Queue("docs")
	require.True(t, ok, "read before Start returns")

	var told []bool
	svc.OnChange(func(_ context.Context, p courier.Pause, paused bool) {
		told = append(told, paused)
		w.Kick()
	})
	_, _, err = svc.Pause(ctx, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>"})
	require.NoError(t, err)
	after := <-changes
	_, ok = after.Topic("orders.created")
	require.True(t, ok)
	_, _, err = svc.Pause(ctx, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>"})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, told, "a pause already in force tells no one")

	st.mu.Lock()
	st.fail = true
	st.mu.Unlock()
	w.Kick()
	require.Eventually(t, func() bool { // the watcher has tried to read, and failed
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.failed > 0
	}, 10*time.Second, time.Millisecond)
	_, ok = w.Current().Topic("orders.created")
	require.True(t, ok, "the pauses last read stay in force while the database is down")
	st.mu.Lock()
	st.fail = false
	st.mu.Unlock()

	_, err = svc.Resume(ctx, courier.PauseTopic, "orders.>")
	require.NoError(t, err)
	after = <-changes
	_, ok = after.Topic("orders.created")
	require.False(t, ok)
	require.Equal(t, []bool{true, false}, told)
	require.Equal(t, 1, w.Current().Len())
}

// A watcher that cannot read the pauses at start refuses to start: a worker must not deliver
// what may be paused.
func TestWatcherStartNeedsTheDatabase(t *testing.T) {
	w := pauses.NewWatcher(&fakeStore{fail: true}, 0, slog.New(slog.DiscardHandler))
	require.Error(t, w.Start(t.Context()))
}
