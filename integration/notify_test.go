package integration

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// On PostgreSQL a committed row wakes the relay through LISTEN/NOTIFY: with the fallback poll
// set to an hour, rows are still delivered promptly, and so is a row that becomes pending again
// through a redrive.
func TestPostgresNotifyWakesRelay(t *testing.T) {
	s := newStack(t, "postgres")
	s.createStream("ORDERS", "orders.>")
	w, err := worker.New(worker.Config{
		Relay: relay.Config{PollInterval: time.Hour, Retry: testRetry},
	}, worker.Deps{
		Temporal: s.tc, Publisher: s.pub, Logger: quiet,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(w.Stop)
	ctx := t.Context()

	// No wait for the listener is needed: once LISTEN takes effect the relay claims once, so a
	// row committed earlier is taken then and a later one is notified.
	enq := func(topic string) int64 {
		var ids []int64
		require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var err error
			ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: topic, Payload: []byte("{}")})
			return err
		}))
		return ids[0]
	}
	id := enq("orders.created")
	require.Eventually(t, func() bool {
		rec, err := s.store.GetOutbox(ctx, id)
		return err == nil && rec.Status == courier.OutboxSent
	}, 30*time.Second, 20*time.Millisecond, "delivered without waiting for the hourly poll")

	dead := enq("billing.invoiced")
	require.Eventually(t, func() bool {
		rec, err := s.store.GetOutbox(ctx, dead)
		return err == nil && rec.Status == courier.OutboxDead
	}, 30*time.Second, 20*time.Millisecond)
	s.createStream("BILLING", "billing.>")
	// As the API's redrive does, wait for the dead record's delivery run to close (it marks the
	// row dead a moment before it ends; relay.DeliveryRuns), then redrive straight in the
	// database: only NOTIFY can wake the relay.
	require.NoError(t, relay.DeliveryRuns{Temporal: s.tc, Wait: 30 * time.Second}.WaitClosed(ctx, courier.OutboxWorkflowID(courier.DefaultSource, dead)))
	_, err = s.store.RedriveOutbox(ctx, dead)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, err := s.store.GetOutbox(ctx, dead)
		return err == nil && rec.Status == courier.OutboxSent
	}, 30*time.Second, 20*time.Millisecond, "a redrive wakes the relay too")
}
