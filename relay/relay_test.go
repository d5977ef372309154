package relay_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
)

// starts records the workflow starts (per record or batch) a relay asks Temporal for; failFor
// makes some fail.
type starts struct {
	mu      sync.Mutex
	ids     []string
	failFor map[string]bool
}

func (s *starts) client(t *testing.T) *mocks.Client {
	c := mocks.NewClient(t)
	c.On("ExecuteWorkflow", mock.Anything, mock.Anything, mock.Anything, mock.Anything).
		Return(func(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.ids = append(s.ids, o.ID)
			if s.failFor[o.ID] {
				return nil, errors.New("temporal unavailable")
			}
			return nil, nil
		}).Maybe()
	return c
}

func (s *starts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func (s *starts) batches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range s.ids {
		if strings.HasPrefix(id, "outbox-batch/") {
			n++
		}
	}
	return n
}

func enqueue(t *testing.T, st *store.Store, n int) []int64 {
	return enqueueTopic(t, st, "a.b", n)
}

// enqueueTopic commits n rows on topic in one transaction.
func enqueueTopic(t *testing.T, st *store.Store, topic string, n int) []int64 {
	var ids []int64
	require.NoError(t, st.DB().RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		for i := 0; i < n; i++ {
			got, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: topic, Payload: []byte("{}")})
			if err != nil {
				return err
			}
			ids = append(ids, got...)
		}
		return nil
	}))
	return ids
}

// One Wake() causes one claim pass, not a busy loop: after it, with an hour-long poll and no
// NOTIFY, a newly committed row stays unclaimed until the next nudge.
func TestWakeClaimsOnceAndSleeps(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	var s starts
	r := relay.New(s.client(t), relay.Config{PollInterval: time.Hour}, relay.Deps{Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	ids := enqueue(t, st, 3)
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 3 }, 10*time.Second, 10*time.Millisecond)
	// The relay marks the rows started after their starts returned.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			rec, err := st.GetOutbox(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, courier.OutboxDispatched, rec.Status)
			if !rec.NextAttemptAt.After(time.Now().Add(50 * time.Minute)) {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "a started row waits for the orphan check")

	late := enqueue(t, st, 1)
	require.Never(t, func() bool { return s.count() > 3 }, 500*time.Millisecond, 20*time.Millisecond,
		"without a nudge the relay sleeps until its poll")
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 4 }, 10*time.Second, 10*time.Millisecond)
	rec, err := st.GetOutbox(t.Context(), late[0])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDispatched, rec.Status)
}

// A row whose workflow could not be started goes back to pending and is claimed again.
func TestFailedStartIsReleased(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	ids := enqueue(t, st, 2)
	s := starts{failFor: map[string]bool{courier.OutboxWorkflowID("", ids[1]): true}}
	r := relay.New(s.client(t), relay.Config{PollInterval: time.Hour}, relay.Deps{Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
	c, err := r.ClaimOnce(t.Context(), relay.Source{Name: courier.DefaultSource, Store: st})
	require.Error(t, err)
	require.Equal(t, relay.Claim{Rows: 2}, c)
	ok, err := st.GetOutbox(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDispatched, ok.Status)
	failed, err := st.GetOutbox(t.Context(), ids[1])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxPending, failed.Status, "released for another try")
}

// A source batches (a batch topic pattern turns batch mode on for every source), yet a claim
// lingers only after a claim that started a batch workflow: per-record rows claimed after a
// claim that batched nothing do not wait. The relay's timer is replaced, so the test counts the
// linger waits instead of timing them.
func TestLingerOnlyAfterABatch(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	var s starts
	const linger = time.Hour
	cfg := relay.Config{PollInterval: time.Hour, Batch: relay.BatchConfig{Topics: []string{"batched.>"}, Linger: linger}}
	r := relay.New(s.client(t), cfg, relay.Deps{Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
	var (
		mu    sync.Mutex
		waits []time.Duration
	)
	r.SetAfter(func(d time.Duration) <-chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, d)
		now := make(chan time.Time, 1)
		now <- time.Now()
		return now
	})
	lingered := func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Two claims of per-record rows in a row: the second does not linger.
	enqueue(t, st, 1)
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 1 }, 10*time.Second, 10*time.Millisecond)
	enqueue(t, st, 1)
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 2 }, 10*time.Second, 10*time.Millisecond)
	require.Empty(t, lingered(), "no claim started a batch, so none lingers")

	// A claim that starts a batch: the claim after it lingers, once, for at most Linger.
	enqueueTopic(t, st, "batched.x", 2)
	r.Wake()
	require.Eventually(t, func() bool { return s.batches() == 1 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 3, s.count(), "both batched rows in one batch workflow")
	enqueue(t, st, 1)
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 4 }, 10*time.Second, 10*time.Millisecond)
	got := lingered()
	require.Len(t, got, 1, "the claim after the batch lingers")
	require.Positive(t, got[0])
	require.LessOrEqual(t, got[0], linger)
}

// ClaimOnce says how many of its rows went to a batch workflow, which is what the linger
// follows: none when batch mode is off for the rows or the batch could not start.
func TestClaimCountsBatchedRows(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	src := relay.Source{Name: courier.DefaultSource, Store: st}
	cfg := relay.Config{Batch: relay.BatchConfig{Topics: []string{"batched.>"}}}
	var s starts
	r := relay.New(s.client(t), cfg, relay.Deps{Sources: []relay.Source{src}})

	enqueue(t, st, 2)
	enqueueTopic(t, st, "batched.x", 3)
	c, err := r.ClaimOnce(t.Context(), src)
	require.NoError(t, err)
	require.Equal(t, relay.Claim{Rows: 5, Batched: 3}, c)

	enqueue(t, st, 1)
	c, err = r.ClaimOnce(t.Context(), src)
	require.NoError(t, err)
	require.Equal(t, relay.Claim{Rows: 1}, c, "per-record rows only")

	more := enqueueTopic(t, st, "batched.y", 2)
	failing := starts{failFor: map[string]bool{courier.OutboxBatchWorkflowID(src.Name, more[0], more[1]): true}}
	r = relay.New(failing.client(t), cfg, relay.Deps{Sources: []relay.Source{src}})
	c, err = r.ClaimOnce(t.Context(), src)
	require.Error(t, err)
	require.Equal(t, relay.Claim{Rows: 2}, c, "a batch that did not start is not counted")
}

// The ordered mode refuses topic patterns a claim cannot match exactly in SQL, and ones that
// break the topic rule.
func TestOrderedConfigCheck(t *testing.T) {
	require.NoError(t, relay.OrderedConfig{Topics: []string{"orders.>", "orders.*", "*.created", "a.*.>"}}.Check())
	require.Error(t, relay.OrderedConfig{Topics: []string{"*.created.>"}}.Check())
	require.Error(t, relay.OrderedConfig{Topics: []string{"orders..x"}}.Check())
}

// On PostgreSQL a relay whose ordered mode covers a source turns the commit-time numbering on
// for its database before it starts any key's delivery; a relay without the ordered mode
// (another worker of a fleet mid-rollout) never turns it off.
func TestOrderedRelayTurnsOnCommitOrder(t *testing.T) {
	st, _ := testenv.Store(t, "postgres")
	ctx := t.Context()
	commitOrder := func() bool {
		on, _, err := st.CommitOrder(ctx)
		require.NoError(t, err)
		return on
	}
	var s starts
	run := func(cfg relay.Config) (stop func()) {
		cfg.PollInterval = 20 * time.Millisecond
		r := relay.New(s.client(t), cfg, relay.Deps{Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(rctx) }()
		return func() { cancel(); <-done }
	}
	started := func(id string) func() bool {
		return func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return slices.Contains(s.ids, id)
		}
	}

	// A relay without the ordered mode delivers a record and leaves the numbering off.
	stop := run(relay.Config{})
	ids := enqueue(t, st, 1)
	require.Eventually(t, started(courier.OutboxWorkflowID(courier.DefaultSource, ids[0])), 10*time.Second, 10*time.Millisecond)
	stop()
	require.False(t, commitOrder())

	// A relay of the ordered mode turns it on and delivers the key.
	ordered := relay.Config{Ordered: relay.OrderedConfig{Sources: []string{courier.DefaultSource}}}
	stop = run(ordered)
	require.NoError(t, st.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Key: "order-1", Payload: []byte(`{}`)})
		return err
	}))
	require.Eventually(t, started(courier.OutboxKeyWorkflowID(courier.DefaultSource, "order-1")), 10*time.Second, 10*time.Millisecond)
	require.True(t, commitOrder())
	stop()

	// A relay without it, started after, leaves it on.
	stop = run(relay.Config{})
	defer stop()
	ids = enqueue(t, st, 1)
	require.Eventually(t, started(courier.OutboxWorkflowID(courier.DefaultSource, ids[0])), 10*time.Second, 10*time.Millisecond)
	require.True(t, commitOrder())
}
