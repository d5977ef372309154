package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
	"github.com/courier-oss/courier/workflows"
)

// TestRecordOutboxBatchHistories records outbox-batch workflow histories from real runs (make
// record-histories): a batch all sent, a batch one of whose records fails and leaves it, and a
// batch whose activity spends its whole budget and hands every record over; each only where
// none was recorded (writeNew).
func TestRecordOutboxBatchHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories", courier.KindOutboxBatch.Workflow)

	t.Run("sent", func(t *testing.T) {
		s, ids := relayBatch(t, "orders.created", "orders.created", "orders.created")
		wid := courier.OutboxBatchWorkflowID(courier.DefaultSource, ids[0], ids[2])
		res := batchResult(t, s, wid)
		require.Equal(t, contract.BatchResult{Sent: 3}, res)
		writeNew(t, filepath.Join(dir, "sent.json"), history(t, s, wid, ""))
	})

	t.Run("one-failed", func(t *testing.T) {
		// The middle record's topic has no stream: it leaves the batch for a delivery of its own.
		s, ids := relayBatch(t, "orders.created", "nowhere.created", "orders.created")
		wid := courier.OutboxBatchWorkflowID(courier.DefaultSource, ids[0], ids[2])
		res := batchResult(t, s, wid)
		require.Equal(t, contract.BatchResult{Sent: 2, Handed: []int64{ids[1]}}, res)
		writeNew(t, filepath.Join(dir, "one-failed.json"), history(t, s, wid, ""))
	})

	t.Run("budget-spent", func(t *testing.T) {
		s := newStack(t, "sqlite")
		s.createStream("ORDERS", "orders.>")
		s.startWorker(true) // no relay: the test starts the batch as the relay would
		ctx := t.Context()
		ids, err := outbox.Enqueue(ctx, s.store.DB(),
			outbox.Message{Topic: "orders.created", Payload: []byte(`{"recorded":true}`)},
			outbox.Message{Topic: "orders.created", Payload: []byte(`{"recorded":true}`)})
		require.NoError(t, err)
		// The store's SQLite pool has one connection: holding it in a transaction makes every
		// attempt of the batch activity wait for the database until its attempt timeout, as a
		// database that is down would.
		tx, err := s.store.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		wid := courier.OutboxBatchWorkflowID(courier.DefaultSource, ids[0], ids[1])
		_, err = s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: relay.DefaultTaskQueue},
			courier.KindOutboxBatch.Workflow, workflows.OutboxBatchParams{
				Source: courier.DefaultSource, IDs: ids, Retry: testRetry,
			})
		require.NoError(t, err)
		// Once the budget is spent the run schedules the hand-over; the database is back.
		require.Eventually(t, func() bool {
			for _, ev := range history(t, s, wid, "").Events {
				if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == contract.HandOutboxBatchName {
					return true
				}
			}
			return false
		}, 2*time.Minute, 100*time.Millisecond, "the batch gives up and hands its records over")
		require.NoError(t, tx.Rollback())
		res := batchResult(t, s, wid)
		require.Equal(t, contract.BatchResult{Handed: ids}, res)
		for _, id := range ids {
			rec, err := s.store.GetOutbox(ctx, id)
			require.NoError(t, err)
			require.Equal(t, courier.OutboxPending, rec.Status, "handed to a delivery of its own")
			require.Contains(t, rec.LastError, "batch delivery gave up")
		}
		writeNew(t, filepath.Join(dir, "budget-spent.json"), history(t, s, wid, ""))
	})
}

// relayBatch commits one record per topic in one transaction on a stack whose relay batches
// every record of the source, so the relay's next claim starts one batch workflow for them all.
func relayBatch(t *testing.T, topics ...string) (*stack, []int64) {
	s := newStack(t, "sqlite")
	s.createStream("ORDERS", "orders.>")
	w, err := worker.New(worker.Config{
		Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry,
			Batch: relay.BatchConfig{Sources: []string{courier.DefaultSource}}},
		ShutdownTimeout: 5 * time.Second,
	}, worker.Deps{
		Temporal: s.tc, Publisher: s.pub, Logger: quiet,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(w.Stop)
	msgs := make([]outbox.Message, len(topics))
	for i, tp := range topics {
		msgs[i] = outbox.Message{Topic: tp, Payload: []byte(`{"recorded":true}`)}
	}
	var ids []int64
	require.NoError(t, s.store.DB().RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
		ids, err = outbox.Enqueue(ctx, tx, msgs...)
		return err
	}))
	return s, ids
}

// batchResult waits for the batch workflow to complete and returns its result.
func batchResult(t *testing.T, s *stack, wid string) contract.BatchResult {
	t.Helper()
	require.Eventually(t, func() bool {
		d, err := s.tc.DescribeWorkflowExecution(t.Context(), wid, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, 2*time.Minute, 50*time.Millisecond, "batch %s closes", wid)
	var res contract.BatchResult
	require.NoError(t, s.tc.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &res))
	return res
}
