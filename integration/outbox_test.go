package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/worker"
)

var topics = []string{"orders.created", "users.registered", "billing.invoiced"}

// produce commits total rows in transactions of 50, row n on topic(n) with key n and payload
// {"n":n}, then one row of topics[0] in a transaction that rolls back (payload "rolled-back",
// which requireStreamOnce looks for). It returns the committed message ids by topic.
func (s *stack) produce(total int, topic func(n int) string) map[string]map[string]bool {
	s.t.Helper()
	ctx := s.t.Context()
	want := map[string]map[string]bool{}
	for _, tp := range topics {
		want[tp] = map[string]bool{}
	}
	for first := 0; first < total; first += 50 {
		msgs := make([]outbox.Message, min(50, total-first))
		for i := range msgs {
			n := first + i
			msgs[i] = outbox.Message{Topic: topic(n), Key: fmt.Sprint(n), Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
		}
		err := s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			ids, err := outbox.Enqueue(ctx, tx, msgs...)
			if err != nil {
				return err
			}
			for i, id := range ids {
				if want[msgs[i].Topic] == nil {
					want[msgs[i].Topic] = map[string]bool{}
				}
				want[msgs[i].Topic][idString(id)] = true
			}
			return nil
		})
		require.NoError(s.t, err)
	}
	// A transaction that rolls back: its rows must never be published.
	tx, err := s.store.DB().BeginTx(ctx, nil)
	require.NoError(s.t, err)
	_, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: topics[0], Payload: []byte(`"rolled-back"`)})
	require.NoError(s.t, err)
	require.NoError(s.t, tx.Rollback())
	return want
}

// requireStreamOnce checks that stream holds every id of want exactly once, no other id, and
// no row of produce's rolled-back transaction.
func (s *stack) requireStreamOnce(stream string, want map[string]bool) {
	s.t.Helper()
	got, payloads := s.streamIDs(stream)
	require.Len(s.t, got, len(want), "stream %s holds every id", stream)
	for id, n := range got {
		require.True(s.t, want[id], "unexpected id %s in %s", id, stream)
		require.Equal(s.t, 1, n, "id %s delivered %d times", id, n)
	}
	for _, p := range payloads {
		require.NotContains(s.t, string(p), "rolled-back")
	}
}

// requireDeadThenRedrive checks that the records of topic (billing.*, which has no stream) are
// the dead ones, each with its reason and at least minAttempts attempts, in a delivery workflow
// of its own found by its outbox id; then it creates the BILLING stream, redrives them through
// the gateway and checks that all total rows end sent and the stream holds each of them once.
// It returns the dead records and the gateway's address and key.
func (s *stack) requireDeadThenRedrive(w *worker.Worker, topic string, want map[string]bool, total int64, minAttempts int) (dead []courier.OutboxRecord, url, token string) {
	t := s.t
	t.Helper()
	ctx := t.Context()
	dead, _, err := s.store.ListOutbox(ctx, courier.OutboxFilter{Status: courier.OutboxDead, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, dead, len(want))
	for _, r := range dead {
		require.Equal(t, topic, r.Topic)
		require.Contains(t, r.LastError, "no JetStream stream")
		require.GreaterOrEqual(t, r.Attempts, minAttempts)
	}
	desc, err := s.tc.DescribeWorkflowExecution(ctx, courier.OutboxWorkflowID(courier.DefaultSource, dead[0].ID), "")
	require.NoError(t, err)
	require.Equal(t, "outbox-delivery", desc.GetWorkflowExecutionInfo().GetType().GetName())

	s.createStream("BILLING", "billing.>")
	url, token = s.gateway(w.Relay().Wake)
	for _, r := range dead {
		resp := do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, r.ID), token, nil)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
	}
	require.Eventually(t, func() bool {
		return s.countByStatus()[courier.OutboxSent] == total
	}, 3*time.Minute, 100*time.Millisecond, "redriven rows are delivered")
	s.requireStreamOnce("BILLING", want)
	return dead, url, token
}

// 1,000 rows committed across 3 topics, the third of which has no stream: every record of the
// first two is delivered exactly once (counted on the consumer side), the third's end dead with
// their error and are delivered once the stream exists and they are redriven. Rows of a
// rolled-back transaction are never published.
func TestOutboxRelayEndToEnd(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			s.createStream("ORDERS", "orders.>")
			s.createStream("USERS", "users.>")
			w := s.startWorker(false)
			ctx := t.Context()

			const total = 1000
			want := s.produce(total, func(n int) string { return topics[n%3] })

			deliverable := len(want[topics[0]]) + len(want[topics[1]])
			require.Eventually(t, func() bool {
				c := s.countByStatus()
				return c[courier.OutboxSent] == int64(deliverable) && c[courier.OutboxDead] == int64(len(want[topics[2]]))
			}, 3*time.Minute, 100*time.Millisecond, "all deliverable rows sent and the rest dead")
			s.requireStreamOnce("ORDERS", want[topics[0]])
			s.requireStreamOnce("USERS", want[topics[1]])

			dead, url, token := s.requireDeadThenRedrive(w, topics[2], want[topics[2]], total, 1)
			rec, err := s.store.GetOutbox(ctx, dead[0].ID)
			require.NoError(t, err)
			require.Equal(t, courier.OutboxSent, rec.Status)
			require.NotNil(t, rec.SentAt)

			// A second redrive of a sent record is a conflict and changes nothing.
			resp := do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, dead[0].ID), token, nil)
			require.Equal(t, http.StatusConflict, resp.StatusCode)
		})
	}
}

// A delivery that finds its record already sent publishes nothing (a repeated start after a
// crash between start and commit).
func TestRepeatedDeliveryOfSentRecordPublishesNothing(t *testing.T) {
	s := newStack(t, "sqlite")
	s.createStream("ORDERS", "orders.>")
	s.startWorker(true)
	ctx := t.Context()
	var ids []int64
	require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte("{}")})
		return err
	}))
	_, err := s.store.MarkOutboxSent(ctx, ids[0])
	require.NoError(t, err)
	run, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: courier.OutboxWorkflowID("", ids[0]), TaskQueue: "courier-outbox",
	}, "outbox-delivery", map[string]any{"Source": "default", "ID": ids[0], "Retry": testRetry})
	require.NoError(t, err)
	var res struct {
		Status      string
		AlreadySent bool
	}
	require.NoError(t, run.Get(ctx, &res))
	require.EqualValues(t, "sent", res.Status)
	require.True(t, res.AlreadySent)
	got, _ := s.streamIDs("ORDERS")
	require.Empty(t, got)
}

func do(t *testing.T, method, url, token string, body any) *http.Response {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// A redrive never attaches the new delivery to the dead record's last run while that run is
// still open (it marks the row dead a moment before it closes): the redrive waits for the run to
// close, or answers 409 with Retry-After when it stays open, and the record is then delivered by
// a fresh run instead of waiting for the hourly orphan check.
func TestRedriveWaitsForTheDeadRunToClose(t *testing.T) {
	s := newStack(t, "sqlite")
	s.createStream("ORDERS", "orders.>")
	w := s.startWorker(false)
	ctx := t.Context()
	url, token := s.gateway(w.Relay().Wake)

	// A dead record whose delivery run is still open: the run sits on a queue no worker
	// polls, as a closing run would for a moment.
	// The row is dead in the transaction that inserts it: a relay that claimed it while it was
	// pending would start the record's own run, which the start below would then return.
	open := func() (int64, client.WorkflowRun) {
		var ids []int64
		err := s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var err error
			if ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`{}`)}); err != nil {
				return err
			}
			_, err = tx.NewRaw("UPDATE courier_outbox SET status = ?, last_error = 'no stream' WHERE id = ?", courier.OutboxDead, ids[0]).Exec(ctx)
			return err
		})
		require.NoError(t, err)
		run, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: courier.OutboxWorkflowID("", ids[0]), TaskQueue: "nobody-polls-this",
		}, "outbox-delivery", map[string]any{"Source": "default", "ID": ids[0], "Retry": testRetry})
		require.NoError(t, err)
		return ids[0], run
	}

	stuck, run := open()
	resp := do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, stuck), token, nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "the open run is waited for, then refused")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	rec, err := s.store.GetOutbox(ctx, stuck)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxDead, rec.Status, "a refused redrive changes nothing")

	// Once that run has closed, the redrive goes through and a new run delivers the record.
	require.NoError(t, s.tc.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "closed"))
	resp = do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, stuck), token, nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	// A run that closes while the redrive waits: the redrive succeeds without a retry.
	closing, run2 := open()
	timer := time.AfterFunc(500*time.Millisecond, func() {
		_ = s.tc.TerminateWorkflow(context.Background(), run2.GetID(), run2.GetRunID(), "closed")
	})
	defer timer.Stop()
	resp = do(t, http.MethodPost, fmt.Sprintf("%s/v1/outbox/%d/redrive", url, closing), token, nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	require.Eventually(t, func() bool {
		a, err1 := s.store.GetOutbox(ctx, stuck)
		b, err2 := s.store.GetOutbox(ctx, closing)
		return err1 == nil && err2 == nil && a.Status == courier.OutboxSent && b.Status == courier.OutboxSent
	}, time.Minute, 50*time.Millisecond, "both records are delivered by fresh runs, not left to the orphan check")
	got, _ := s.streamIDs("ORDERS")
	require.Equal(t, map[string]int{idString(stuck): 1, idString(closing): 1}, got)
}
