package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// The outbox batch mode end to end, on SQLite and PostgreSQL: records of the batched topics go
// out in batch workflows (no workflow of their own) and reach the stream once each; a record of
// a batched topic that fails leaves its batch for a delivery of its own and goes dead there
// with its reason, and redrives like any other; records of other topics keep one workflow each;
// a rolled-back transaction's rows are never published.
func TestOutboxBatchModeEndToEnd(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			s.createStream("ORDERS", "orders.>")
			s.createStream("USERS", "users.>")
			w, err := worker.New(worker.Config{
				Relay: relay.Config{PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second, Retry: testRetry,
					// orders and billing batch; users keep one workflow per record.
					Batch: relay.BatchConfig{Topics: []string{"orders.>", "billing.*"}, Max: 200}},
				ShutdownTimeout: 5 * time.Second,
			}, worker.Deps{
				Temporal:  s.tc,
				Sources:   []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
				Publisher: s.pub,
				Logger:    quiet,
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(t.Context()))
			t.Cleanup(w.Stop)
			ctx := t.Context()

			const total = 900
			// Two thirds orders, the rest users and billing (no stream).
			want := s.produce(total, func(n int) string {
				if n%3 == 1 {
					return topics[1+n%2]
				}
				return topics[0]
			})

			deliverable := len(want[topics[0]]) + len(want[topics[1]])
			require.Eventually(t, func() bool {
				c := s.countByStatus()
				return c[courier.OutboxSent] == int64(deliverable) && c[courier.OutboxDead] == int64(len(want[topics[2]]))
			}, 3*time.Minute, 100*time.Millisecond, "every deliverable row sent and the rest dead")
			s.requireStreamOnce("ORDERS", want[topics[0]])
			s.requireStreamOnce("USERS", want[topics[1]])

			// Batched records have no workflow of their own; per-record topics do.
			for id := range want[topics[0]] {
				_, err := s.tc.DescribeWorkflowExecution(ctx, "outbox/"+id, "")
				var nf *serviceerror.NotFound
				require.ErrorAs(t, err, &nf, "batched record %s has no delivery workflow of its own", id)
				break
			}
			for id := range want[topics[1]] {
				desc, err := s.tc.DescribeWorkflowExecution(ctx, "outbox/"+id, "")
				require.NoError(t, err)
				require.Equal(t, "outbox-delivery", desc.GetWorkflowExecutionInfo().GetType().GetName())
				break
			}
			require.Eventually(t, func() bool {
				resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
					Query: fmt.Sprintf("%s = 'outbox-batch'", courier.SAKind)})
				return err == nil && len(resp.GetExecutions()) > 0 &&
					len(resp.GetExecutions()) < len(want[topics[0]])/2
			}, 30*time.Second, 200*time.Millisecond, "the batched records went out in far fewer workflows than records")

			// A batched record that failed (no stream) went dead in a delivery of its own,
			// with its reason, counting the batch's attempt and its own.
			// Redrive works as for any record.
			s.requireDeadThenRedrive(w, topics[2], want[topics[2]], total, 2)
		})
	}
}
