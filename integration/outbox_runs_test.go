package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/courier-oss/courier"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
)

// Whichever mode delivers a record, the workflow_id that GET /v1/outbox/{id} and the list answer
// (read here through the Go client) names a workflow Temporal has, the one that delivered the
// record or gave up on it: its own delivery (per record, and a batched record that failed and
// left its batch), its batch's (batch mode), its key's (ordered mode, the dead record's key run
// Failed). A record no workflow has taken names none. On SQLite and PostgreSQL.
func TestOutboxRecordNamesItsRun(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			s.createStream("PLAIN", "plain.created")
			s.createStream("BATCH", "batch.created")
			s.createStream("ORDERED", "ordered.sent")
			ctx := t.Context()
			w, err := worker.New(worker.Config{
				Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry,
					Batch:   relay.BatchConfig{Topics: []string{"batch.>"}},
					Ordered: relay.OrderedConfig{Topics: []string{"ordered.>"}}},
				ShutdownTimeout: 5 * time.Second,
			}, worker.Deps{Temporal: s.tc, Publisher: s.pub, Logger: quiet,
				Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}}})
			require.NoError(t, err)
			url, admin := s.gateway(w.Relay().Wake)
			c, err := cc.New(url, cc.WithAPIKey(admin))
			require.NoError(t, err)

			// Each case: its topic and key, the workflow type that must deliver it, and its status.
			cases := []struct {
				name, topic, key, wfType string
				status                   courier.OutboxStatus
			}{
				{"per record", "plain.created", "", courier.KindOutbox.Workflow, courier.OutboxSent},
				{"batched", "batch.created", "", courier.KindOutboxBatch.Workflow, courier.OutboxSent},
				{"batched", "batch.created", "", courier.KindOutboxBatch.Workflow, courier.OutboxSent},
				{"left its batch, dead in its own", "batch.lost", "", courier.KindOutbox.Workflow, courier.OutboxDead},
				{"ordered", "ordered.sent", "k1", courier.KindOutboxKey.Workflow, courier.OutboxSent},
				{"ordered", "ordered.sent", "k1", courier.KindOutboxKey.Workflow, courier.OutboxSent},
				{"ordered, dead, its key blocked", "ordered.lost", "k2", courier.KindOutboxKey.Workflow, courier.OutboxDead},
			}
			msgs := make([]outbox.Message, len(cases))
			for i, cs := range cases {
				msgs[i] = outbox.Message{Topic: cs.topic, Key: cs.key, Payload: []byte(`{}`)}
			}
			var ids []int64
			require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				ids, err = outbox.Enqueue(ctx, tx, msgs...)
				return err
			}))
			rec, err := c.GetOutbox(ctx, "", ids[0])
			require.NoError(t, err)
			require.Empty(t, rec.WorkflowID, "no workflow has taken the record yet (no worker runs)")

			require.NoError(t, w.Start(ctx))
			t.Cleanup(w.Stop)
			require.Eventually(t, func() bool {
				n := s.countByStatus()
				return n[courier.OutboxSent] == 5 && n[courier.OutboxDead] == 2
			}, time.Minute, 50*time.Millisecond, "every record sent or dead")

			listed := map[int64]string{}
			for r, err := range c.AllOutbox(ctx, cc.OutboxQuery{}) {
				require.NoError(t, err)
				listed[r.ID] = r.WorkflowID
			}
			for i, cs := range cases {
				rec, err := c.GetOutbox(ctx, "", ids[i])
				require.NoError(t, err)
				require.Equal(t, cs.status, rec.Status, cs.name)
				wid := rec.WorkflowID
				require.Equal(t, wid, listed[ids[i]], "%s: the list answers the same", cs.name)
				d, err := s.tc.DescribeWorkflowExecution(ctx, wid, "")
				require.NoError(t, err, "%s: record %d names %q, which Temporal must have", cs.name, ids[i], wid)
				require.Equal(t, cs.wfType, d.GetWorkflowExecutionInfo().GetType().GetName(), cs.name)
				var closed enumspb.WorkflowExecutionStatus
				require.Eventually(t, func() bool {
					d, err := s.tc.DescribeWorkflowExecution(ctx, wid, "")
					closed = d.GetWorkflowExecutionInfo().GetStatus()
					return err == nil && closed != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
				}, 30*time.Second, 50*time.Millisecond, cs.name)
				switch cs.wfType {
				case courier.KindOutbox.Workflow:
					require.Equal(t, courier.OutboxWorkflowID("", ids[i]), wid)
				case courier.KindOutboxKey.Workflow:
					require.Equal(t, courier.OutboxKeyWorkflowID("", cs.key), wid)
				case courier.KindOutboxBatch.Workflow:
					// outbox-batch/default/<first>-<last>, the record among them.
					first, last, ok := strings.Cut(strings.TrimPrefix(wid, "outbox-batch/default/"), "-")
					require.True(t, ok, wid)
					lo, err1 := strconv.ParseInt(first, 10, 64)
					hi, err2 := strconv.ParseInt(last, 10, 64)
					require.NoError(t, err1)
					require.NoError(t, err2)
					require.True(t, lo <= ids[i] && ids[i] <= hi, "%s names record %d", wid, ids[i])
				}
				want := enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
				if cs.status == courier.OutboxDead {
					want = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED // the run that gave up on it
				}
				require.Equal(t, want, closed, cs.name)
			}
		})
	}
}
