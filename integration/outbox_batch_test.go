package integration

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
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
				Sources:   []relay.Source{{Name: courier.DefaultSource, Store: s.store, DSN: pgDSN(s.dsn)}},
				Publisher: s.pub,
				Logger:    quiet,
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(t.Context()))
			t.Cleanup(w.Stop)
			ctx := t.Context()

			const total = 900
			want := map[string]map[string]bool{}
			for _, tp := range topics {
				want[tp] = map[string]bool{}
			}
			for batch := 0; batch < total/50; batch++ {
				err := s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
					msgs := make([]outbox.Message, 50)
					for i := range msgs {
						n := batch*50 + i
						// Two thirds orders, the rest users and billing (no stream).
						tp := topics[0]
						if n%3 == 1 {
							tp = topics[1+n%2]
						}
						msgs[i] = outbox.Message{Topic: tp, Key: fmt.Sprint(n), Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
					}
					ids, err := outbox.Enqueue(ctx, tx, msgs...)
					for i, id := range ids {
						want[msgs[i].Topic][idString(id)] = true
					}
					return err
				})
				require.NoError(t, err)
			}
			tx, err := s.store.DB().BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`"rolled-back"`)})
			require.NoError(t, err)
			require.NoError(t, tx.Rollback())

			deliverable := len(want[topics[0]]) + len(want[topics[1]])
			require.Eventually(t, func() bool {
				c := s.countByStatus()
				return c[courier.OutboxSent] == int64(deliverable) && c[courier.OutboxDead] == int64(len(want[topics[2]]))
			}, 3*time.Minute, 100*time.Millisecond, "every deliverable row sent and the rest dead")

			for i, stream := range []string{"ORDERS", "USERS"} {
				got, payloads := s.streamIDs(stream)
				require.Len(t, got, len(want[topics[i]]), "stream %s holds every id of %s", stream, topics[i])
				for id, n := range got {
					require.True(t, want[topics[i]][id], "unexpected id %s in %s", id, stream)
					require.Equal(t, 1, n, "id %s delivered %d times", id, n)
				}
				for _, p := range payloads {
					require.NotContains(t, string(p), "rolled-back")
				}
			}

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
			dead, _, err := s.store.ListOutbox(ctx, store.OutboxFilter{Status: courier.OutboxDead, Limit: 1000})
			require.NoError(t, err)
			require.Len(t, dead, len(want[topics[2]]))
			for _, r := range dead {
				require.Equal(t, topics[2], r.Topic)
				require.Contains(t, r.LastError, "no JetStream stream")
				require.GreaterOrEqual(t, r.Attempts, 2)
			}
			desc, err := s.tc.DescribeWorkflowExecution(ctx, courier.OutboxWorkflowID(courier.DefaultSource, dead[0].ID), "")
			require.NoError(t, err)
			require.Equal(t, "outbox-delivery", desc.GetWorkflowExecutionInfo().GetType().GetName())

			// Redrive works as for any record.
			s.createStream("BILLING", "billing.>")
			url, token := s.gateway(w.Relay().Wake)
			for _, r := range dead {
				resp := do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, r.ID), token, nil)
				require.Equal(t, http.StatusAccepted, resp.StatusCode)
			}
			require.Eventually(t, func() bool {
				return s.countByStatus()[courier.OutboxSent] == total
			}, 3*time.Minute, 100*time.Millisecond, "redriven rows are delivered")
			got, _ := s.streamIDs("BILLING")
			require.Len(t, got, len(want[topics[2]]))
			for id, n := range got {
				require.True(t, want[topics[2]][id])
				require.Equal(t, 1, n)
			}
		})
	}
}
