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

func (f *failingClaims) ClaimReady(context.Context, string, int, func(store.BandCounts, int) store.BandCounts) (store.Claim, error) {
	if f.claims.Add(1) == 1 {
		return store.Claim{}, errors.New("database is locked")
	}
	return store.Claim{}, nil
}

func (f *failingClaims) UnpushedTasks(context.Context, time.Duration, int) ([]store.ClaimedTask, error) {
	return nil, nil
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
