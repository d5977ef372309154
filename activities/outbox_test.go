package activities_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/mq"
)

// attemptStore is an outbox table of one record that keeps what the failed attempts recorded
// and whether the context they were recorded with was still alive.
type attemptStore struct {
	batchStore
	mu       sync.Mutex
	recorded []string
	deadCtx  int
}

func (s *attemptStore) RecordOutboxAttempt(ctx context.Context, _ int64, lastErr string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil {
		s.deadCtx++
		return ctx.Err()
	}
	s.recorded = append(s.recorded, lastErr)
	return nil
}

// hangingPub never acknowledges: a publish ends when its context does.
type hangingPub struct{ err error }

func (p hangingPub) Publish(ctx context.Context, _ mq.Message) error {
	if p.err != nil {
		return p.err
	}
	<-ctx.Done()
	return ctx.Err()
}
func (hangingPub) Ping(context.Context) error { return nil }
func (hangingPub) Close() error               { return nil }

// deliverOnce runs the delivery activity once, as a workflow's attempt bounded by timeout.
func deliverOnce(t *testing.T, st activities.OutboxStore, pub mq.Publisher, timeout time.Duration) (time.Duration, error) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	a := activities.NewOutbox(map[string]activities.OutboxStore{courier.DefaultSource: st}, pub, nil)
	env.RegisterActivityWithOptions(a.Deliver, activity.RegisterOptions{Name: contract.DeliverOutboxName})
	var took time.Duration
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: timeout,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
		return workflow.ExecuteActivity(ctx, contract.DeliverOutboxName, contract.DeliverParams{ID: 7}).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "deliver-once"})
	start := time.Now()
	env.ExecuteWorkflow("deliver-once")
	took = time.Since(start)
	require.True(t, env.IsWorkflowCompleted())
	return took, env.GetWorkflowError()
}

// An attempt that the broker never answers ends before its deadline with time left to record
// itself: the row counts it and shows why, instead of the write failing on an expired context
// and the attempt vanishing from the API.
func TestDeliverRecordsAnAttemptCutByItsDeadline(t *testing.T) {
	st := &attemptStore{batchStore: batchStore{recs: map[int64]courier.OutboxRecord{
		7: {ID: 7, Topic: "orders.created", Payload: []byte(`{}`), Status: courier.OutboxDispatched}}}}
	took, err := deliverOnce(t, st, hangingPub{}, 2*time.Second)
	require.Error(t, err)
	require.Zero(t, st.deadCtx, "the attempt is recorded with a context of its own")
	require.Len(t, st.recorded, 1)
	require.Contains(t, st.recorded[0], "deadline exceeded")
	require.Less(t, took, 2*time.Second+time.Second, "the attempt ends within its own time, recording included")
}

// Every failed attempt is benign to the SDK's log (debug level, not a stream of errors): a
// broker that is down is retried; a record that can never be published is not, and is logged
// once when it goes dead.
func TestDeliverClassifiesFailures(t *testing.T) {
	rec := courier.OutboxRecord{ID: 7, Topic: "orders.created", Payload: []byte(`{}`), Status: courier.OutboxDispatched}
	for _, c := range []struct {
		pubErr    error
		benign    bool
		retryable bool
	}{
		{mq.ErrBrokerDown, true, true},
		{errors.New("connection refused"), true, true},
		{mq.ErrUnknownTopic, true, false},
		{mq.ErrRefused, true, false},
	} {
		st := &attemptStore{batchStore: batchStore{recs: map[int64]courier.OutboxRecord{7: rec}}}
		_, err := deliverOnce(t, st, hangingPub{err: c.pubErr}, 10*time.Second)
		var app *temporal.ApplicationError
		require.ErrorAs(t, err, &app, "%v", c.pubErr)
		require.Equal(t, c.benign, app.Category() == temporal.ApplicationErrorCategoryBenign, "%v", c.pubErr)
		require.Equal(t, c.retryable, !app.NonRetryable(), "%v", c.pubErr)
		require.Len(t, st.recorded, 1, "every attempt is recorded")
	}
}
