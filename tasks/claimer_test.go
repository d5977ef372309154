package tasks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/store"
)

// failingClaims fails its first claim, as a busy or unreachable database does, and counts
// every claim.
type failingClaims struct {
	claims atomic.Int64
}

func (f *failingClaims) ListQueues(context.Context) ([]courier.Queue, error) {
	return []courier.Queue{{Name: "docs", PushURL: "http://127.0.0.1:1/push", ConcurrencyLimit: 1}}, nil
}

func (f *failingClaims) RunClaim(context.Context, string, func(context.Context, dispatch.ClaimTx) error) error {
	if f.claims.Add(1) == 1 {
		return errors.New("database is locked")
	}
	return nil
}

func (f *failingClaims) UnpushedTasks(context.Context, time.Duration, int) ([]dispatch.Attempt, error) {
	return nil, nil
}

func (f *failingClaims) ReleaseStaleSlotHolds(context.Context, time.Duration) (int, error) {
	return 0, nil
}

func (f *failingClaims) ExpireTimedOutAttempts(context.Context, int) (store.Expired, error) {
	return store.Expired{}, nil
}

func (f *failingClaims) Listen(context.Context, string, func(), *slog.Logger) func() {
	return func() {}
}

// A claim that fails is tried again within claimRetry, not at the next poll: with an hour's
// poll and no wake, the second claim still comes.
func TestFailedClaimIsRetriedSoon(t *testing.T) {
	st := &failingClaims{}
	c := NewClaimer(st, nil, "courier-outbox", Config{PollInterval: time.Hour}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	require.Eventually(t, func() bool { return st.claims.Load() >= 2 }, 10*claimRetry, 10*time.Millisecond,
		"the failed claim was tried again")
	cancel()
	require.NoError(t, <-done)
}

// queueChangedAfterList lists the queues as they are, then removes the push URL of the one it
// listed before returning: an operator's PUT that lands between a claimer's list and its
// claim.
type queueChangedAfterList struct {
	*store.Store
	t testing.TB
}

func (s queueChangedAfterList) ListQueues(ctx context.Context) ([]courier.Queue, error) {
	qs, err := s.Store.ListQueues(ctx)
	for _, q := range qs {
		q.PushURL = ""
		_, _, perr := s.PutQueue(ctx, q)
		require.NoError(s.t, perr)
	}
	return qs, err
}

// A queue whose push URL is removed after the claimer listed it (with the URL) claims nothing:
// the claim reads the queue again in its own transaction, as it reads the pause, so its tasks
// wait as docs/tasks.md says rather than failing an attempt with "no push_url".
func TestClaimDecidesThePushURLInItsTransaction(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			st, _ := testenv.Store(t, d)
			ctx := t.Context()
			_, _, err := st.PutQueue(ctx, courier.Queue{Name: "acc-ver", PushURL: "http://127.0.0.1:9/push"})
			require.NoError(t, err)
			_, _, err = st.InsertTask(ctx, courier.TaskRequest{TaskID: "t-1", Version: 1, Queue: "acc-ver"})
			require.NoError(t, err)

			c := NewClaimer(queueChangedAfterList{Store: st, t: t}, nil, "courier", Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			c.pass(ctx) // would start the attempt on the nil client, and panic, had it claimed it

			got, err := st.GetTask(ctx, "t-1", 1)
			require.NoError(t, err)
			require.Equal(t, courier.TaskPending, got.Status, "the task waits for a push URL")
			require.Zero(t, got.Attempt, "no attempt was spent")
			q, err := st.GetQueue(ctx, "acc-ver")
			require.NoError(t, err)
			require.Zero(t, q.InFlight)
		})
	}
}
