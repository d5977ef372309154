package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/store"
)

func pendingIn(t *testing.T, s *store.Store, queue string) int {
	t.Helper()
	n, err := s.DB().NewSelect().Table("courier_tasks").Where("queue = ? AND status = 'pending'", queue).Count(context.Background())
	require.NoError(t, err)
	return int(n)
}

// A queue's backlog budget refuses, with backlog_full and Retry-After, an insert that would
// leave one more task Pending than max_pending, writing nothing (not even the task's head);
// repeats, new versions of pending tasks and tasks in other statuses are counted right.
func TestQueueMaxPending(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "small", MaxPending: 2})
		require.NoError(t, err)
		insert := func(id string, v int64) (courier.TaskInsertOutcome, error) {
			r := taskReq(id, v, 3, `{}`)
			r.Queue = "small"
			_, out, err := s.InsertTask(ctx, r)
			return out, err
		}
		for _, id := range []string{"a", "b"} {
			out, err := insert(id, 1)
			require.NoError(t, err)
			require.Equal(t, courier.TaskCreated, out)
		}

		_, err = insert("c", 1)
		require.Equal(t, courier.CodeBacklogFull, courier.ErrorCode(err), "%v", err)
		var ce *courier.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, store.BacklogRetryAfter, ce.RetryAfter)
		require.Equal(t, "small", ce.Details["queue"])
		_, err = s.GetLatestTask(ctx, "c")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "nothing written")
		n, err := s.DB().NewSelect().Table("courier_task_heads").Where("task_id = 'c'").Count(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "not even the task's head row")
		require.Equal(t, 2, pendingIn(t, s, "small"))

		// Repeating an accepted insert still answers with the task.
		out, err := insert("a", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskExisting, out)
		// A new version replaces its pending predecessor: the backlog does not grow.
		out, err = insert("a", 2)
		require.NoError(t, err)
		require.Equal(t, courier.TaskCreated, out)
		require.Equal(t, 2, pendingIn(t, s, "small"))

		// Tasks out of Pending leave room; a failed task coming back to Pending takes it.
		setStatus(t, s, "b", 1, courier.TaskProcessing)
		out, err = insert("c", 1)
		require.NoError(t, err, "processing tasks are not backlog")
		require.Equal(t, courier.TaskCreated, out)
		setStatus(t, s, "b", 1, courier.TaskFailed)
		_, err = insert("b", 1)
		require.Equal(t, courier.CodeBacklogFull, courier.ErrorCode(err), "re-submitting a failed task adds to the backlog")
		got, err := s.GetTask(ctx, "b", 1)
		require.NoError(t, err)
		require.Equal(t, courier.TaskFailed, got.Status, "the refused replace left the row as it was")

		// Other queues have no budget.
		for i := 0; i < 5; i++ {
			_, _, err := s.InsertTask(ctx, taskReq(fmt.Sprintf("d-%d", i), 1, 3, `{}`))
			require.NoError(t, err)
		}
	})
}

// Concurrent inserts into a queue with a budget never overshoot it.
func TestQueueMaxPendingConcurrent(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		_, _, err := s.PutQueue(ctx, courier.Queue{Name: "busy", MaxPending: 5})
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 20)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := taskReq(fmt.Sprintf("t-%d", i), 1, 3, `{}`)
				r.Queue = "busy"
				_, _, errs[i] = s.InsertTask(ctx, r)
			}()
		}
		wg.Wait()
		created, full := 0, 0
		for _, err := range errs {
			switch courier.ErrorCode(err) {
			case courier.CodeBacklogFull:
				full++
			default:
				if err == nil {
					created++
					continue
				}
				// SQLite may report a busy writer under this much contention; that is not
				// what this test is about, and it wrote nothing either.
				t.Logf("insert: %v", err)
			}
		}
		require.Equal(t, 5, created)
		require.Equal(t, 5, pendingIn(t, s, "busy"))
		require.Positive(t, full)
	})
}

// Queue admission settings are validated and kept in the queue's configuration.
func TestQueueAdmissionSettings(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		q, _, err := s.PutQueue(ctx, courier.Queue{Name: "q", InsertRate: 2.5, InsertBurst: 10, MaxPending: 1000})
		require.NoError(t, err)
		require.Equal(t, courier.Rate{PerSecond: 2.5, Burst: 10}, q.InsertLimit())
		require.Equal(t, 1000, q.MaxPending)
		q, err = s.GetQueue(ctx, "q")
		require.NoError(t, err)
		require.Equal(t, 1000, q.MaxPending)
		require.Equal(t, 2.5, q.InsertRate)

		for _, bad := range []courier.Queue{
			{Name: "q", InsertRate: -1},
			{Name: "q", InsertBurst: 3},
			{Name: "q", MaxPending: -1},
			{Name: "q", InsertRate: courier.MaxRatePerSecond + 1},
		} {
			_, _, err := s.PutQueue(ctx, bad)
			require.Equal(t, courier.CodeValidation, courier.ErrorCode(err), "%+v", bad)
		}
	})
}

// A key's own request rate is stored with it, changed and cleared; a business type keeps its
// insert rate.
func TestAdmissionRatesStored(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		plain, plainTok, err := s.CreateAPIKey(ctx, "plain", []apikey.Scope{apikey.ScopeProducer})
		require.NoError(t, err)
		require.Nil(t, plain.Rate)
		got, err := s.LookupAPIKey(ctx, plainTok)
		require.NoError(t, err)
		require.Nil(t, got.Rate, "no own rate: the gateway's default")

		own, ownTok, err := s.NewAPIKey(ctx, apikey.Key{Name: "own", Scopes: []apikey.Scope{apikey.ScopeProducer},
			Rate: &courier.Rate{PerSecond: 5, Burst: 20}})
		require.NoError(t, err)
		got, err = s.LookupAPIKey(ctx, ownTok)
		require.NoError(t, err)
		require.Equal(t, &courier.Rate{PerSecond: 5, Burst: 20}, got.Rate)

		require.NoError(t, s.SetAPIKeyRate(ctx, plain.ID, &courier.Rate{}))
		got, err = s.LookupAPIKey(ctx, plainTok)
		require.NoError(t, err)
		require.Equal(t, &courier.Rate{}, got.Rate, "a zero rate is stored: unlimited")
		require.NoError(t, s.SetAPIKeyRate(ctx, own.ID, nil))
		got, err = s.LookupAPIKey(ctx, ownTok)
		require.NoError(t, err)
		require.Nil(t, got.Rate)

		require.Equal(t, courier.CodeValidation, courier.ErrorCode(s.SetAPIKeyRate(ctx, own.ID, &courier.Rate{PerSecond: -1})))
		_, _, err = s.NewAPIKey(ctx, apikey.Key{Name: "bad", Scopes: []apikey.Scope{apikey.ScopeProducer}, Rate: &courier.Rate{Burst: 2}})
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(s.SetAPIKeyRate(ctx, "key_nope", nil)))
		require.NoError(t, s.RevokeAPIKey(ctx, own.ID))
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(s.SetAPIKeyRate(ctx, own.ID, nil)), "revoked keys are not changed")

		b, _, err := s.PutBizType(ctx, courier.BizType{Name: "orders", Delivery: courier.DeliveryMQ, Topic: "orders", InsertRate: 50, InsertBurst: 100})
		require.NoError(t, err)
		require.Equal(t, courier.Rate{PerSecond: 50, Burst: 100}, b.InsertLimit())
		b, err = s.GetBizType(ctx, "orders")
		require.NoError(t, err)
		require.Equal(t, courier.Rate{PerSecond: 50, Burst: 100}, b.InsertLimit())
		_, _, err = s.PutBizType(ctx, courier.BizType{Name: "orders", Delivery: courier.DeliveryMQ, Topic: "orders", InsertBurst: 100})
		require.Equal(t, courier.CodeValidation, courier.ErrorCode(err))
	})
}
