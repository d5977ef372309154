package relay_test

import (
	"context"
	"errors"
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
	"github.com/courier-oss/courier/workflows"
)

// starts records the workflow starts a relay asks Temporal for; failFor makes some fail.
type starts struct {
	mu      sync.Mutex
	ids     []string
	failFor map[string]bool
}

func (s *starts) client(t *testing.T) *mocks.Client {
	c := mocks.NewClient(t)
	c.On("ExecuteWorkflow", mock.Anything, mock.Anything, workflows.OutboxDeliveryName, mock.Anything).
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

func enqueue(t *testing.T, st *store.Store, n int) []int64 {
	var ids []int64
	require.NoError(t, st.DB().RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		for i := 0; i < n; i++ {
			got, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "a.b", Payload: []byte("{}")})
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
	r := relay.New(s.client(t), relay.Config{PollInterval: time.Hour}, []relay.Source{{Name: courier.DefaultSource, Store: st}}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	ids := enqueue(t, st, 3)
	r.Wake()
	require.Eventually(t, func() bool { return s.count() == 3 }, 10*time.Second, 10*time.Millisecond)
	for _, id := range ids {
		rec, err := st.GetOutbox(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, courier.OutboxDispatched, rec.Status)
		require.True(t, rec.NextAttemptAt.After(time.Now().Add(50*time.Minute)), "a started row waits for the orphan check")
	}

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
	r := relay.New(s.client(t), relay.Config{PollInterval: time.Hour}, []relay.Source{{Name: courier.DefaultSource, Store: st}}, nil)
	n, err := r.ClaimOnce(t.Context(), relay.Source{Name: courier.DefaultSource, Store: st})
	require.Error(t, err)
	require.Equal(t, 2, n)
	ok, err := st.GetOutbox(t.Context(), ids[0])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDispatched, ok.Status)
	failed, err := st.GetOutbox(t.Context(), ids[1])
	require.NoError(t, err)
	require.Equal(t, courier.OutboxPending, failed.Status, "released for another try")
}
