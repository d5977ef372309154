package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// The relay delivers from a producer's own database as well as courier's: the same id in both
// becomes two messages (<id> and accounts/<id>) and two workflows (outbox/<id> and
// outbox/accounts/<id>).
func TestProducerDatabaseSource(t *testing.T) {
	s := newStack(t, "sqlite")
	s.createStream("USERS", "users.>")
	prod, _ := testenv.Store(t, "postgres")
	w, err := worker.New(worker.Config{Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry}}, worker.Deps{
		Temporal: s.tc, Publisher: s.pub, Logger: quiet,
		Sources: []relay.Source{
			{Name: courier.DefaultSource, Store: s.store},
			{Name: "accounts", Store: prod},
		},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(w.Stop)
	ctx := t.Context()
	for _, db := range []*bun.DB{s.store.DB(), prod.DB()} {
		require.NoError(t, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "users.registered", Payload: []byte("{}")})
			return err
		}))
	}
	require.Eventually(t, func() bool {
		a, err1 := s.store.GetOutbox(ctx, 1)
		b, err2 := prod.GetOutbox(ctx, 1)
		return err1 == nil && err2 == nil && a.Status == courier.OutboxSent && b.Status == courier.OutboxSent
	}, time.Minute, 50*time.Millisecond)
	got, _ := s.streamIDs("USERS")
	require.Equal(t, map[string]int{"1": 1, "accounts/1": 1}, got)
	for _, id := range []string{"outbox/1", "outbox/accounts/1"} {
		_, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		require.NoError(t, err, id)
	}
}
