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

// A paused topic pattern holds its outbox records: they are inserted and kept, never claimed
// or published, and no attempt is counted, while records of other topics committed in the
// same transactions flow; on resume they are published at their first attempt. Per record and
// in the batch mode, on both databases.
func TestPausedTopicHoldsRecords(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		for _, batch := range []bool{false, true} {
			name := dialect + "/per-record"
			if batch {
				name = dialect + "/batch"
			}
			t.Run(name, func(t *testing.T) { testPausedTopic(t, dialect, batch) })
		}
	}
}

func testPausedTopic(t *testing.T, dialect string, batch bool) {
	s := newStack(t, dialect)
	ctx := t.Context()
	s.createStream("ORDERS", "orders.>")
	s.createStream("OTHER", "other.>")
	s.watchPauses()
	_, _, err := s.store.Pause(ctx, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>", Reason: "moving the stream"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok := s.paused.Current().Topic("orders.x")
		return ok
	}, 10*time.Second, 20*time.Millisecond)

	cfg := relay.Config{BatchSize: 50, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second, Retry: testRetry}
	if batch {
		cfg.Batch = relay.BatchConfig{Topics: []string{">"}}
	}
	w, err := worker.New(worker.Config{Relay: cfg, ShutdownTimeout: 5 * time.Second}, worker.Deps{
		Temporal: s.tc, Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
		Publisher: s.pub, Logger: quiet, Pauses: s.paused,
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	// Each transaction commits a held record and a flowing one together: the claim that takes
	// the flowing one would have taken the other too, were it not paused.
	var held, flowing []int64
	for round := range 3 {
		err := s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			ids, err := outbox.Enqueue(ctx, tx,
				outbox.Message{Topic: "orders.x", Key: "o", Payload: []byte(`{"held":true}`)},
				outbox.Message{Topic: "other.y", Key: "p", Payload: []byte(`{"held":false}`)})
			held, flowing = append(held, ids[0]), append(flowing, ids[1])
			return err
		})
		require.NoError(t, err)
		require.Eventually(t, func() bool { // wait for this round's flowing record
			rec, err := s.store.GetOutbox(ctx, flowing[round])
			return err == nil && rec.Status == courier.OutboxSent
		}, 30*time.Second, 20*time.Millisecond)
	}
	other, _ := s.streamIDs("OTHER")
	require.Len(t, other, 3)
	orders, _ := s.streamIDs("ORDERS")
	require.Empty(t, orders, "nothing of a paused topic is published")
	for _, id := range held {
		rec, err := s.store.GetOutbox(ctx, id)
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status, "a paused record is kept, not claimed")
		require.Zero(t, rec.Attempts, "no attempt is counted while paused")
	}

	_, err = s.store.Resume(ctx, courier.PauseTopic, "orders.>")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, id := range held {
			rec, err := s.store.GetOutbox(ctx, id)
			if err != nil || rec.Status != courier.OutboxSent {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	for _, id := range held {
		rec, err := s.store.GetOutbox(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts, "published at the first attempt on resume")
	}
	orders, _ = s.streamIDs("ORDERS")
	require.Len(t, orders, 3)
	for _, id := range held {
		require.Equal(t, 1, orders[idString(id)])
	}
}
