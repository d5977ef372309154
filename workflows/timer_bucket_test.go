package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// reserve is one answer of the bucket's reserve: when it is asked (the workflow's clock), with
// what claim, and what it answered.
type reserve struct {
	at     time.Time
	claim  string
	answer contract.ReserveTimerBatchResult
}

// reserveBatches registers the bucket's reserve (a local activity on the workflows' queue),
// answering the n-th call (from 0) with answer(n) and recording each call in calls when set.
func reserveBatches(env *testsuite.TestWorkflowEnvironment, calls *[]reserve,
	answer func(n int) (contract.ReserveTimerBatchResult, error)) {
	n := 0
	env.RegisterActivityWithOptions(func(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.ReserveTimerBatchResult, error) {
		a, err := answer(n)
		n++
		if calls != nil {
			*calls = append(*calls, reserve{at: env.Now(), claim: p.Claim, answer: a})
		}
		return a, err
	}, activity.RegisterOptions{Name: contract.ReserveTimerBatchName})
}

// reserveAlways answers every reserve with r.
func reserveAlways(r contract.ReserveTimerBatchResult, err error) func(int) (contract.ReserveTimerBatchResult, error) {
	return func(int) (contract.ReserveTimerBatchResult, error) { return r, err }
}

// A bucket sleeps until its second begins, takes full batches one after another, sleeps until
// the next fire time the batch reports, and ends when none is left; every batch has a claim of
// its own, reserved on the workflows' queue (a local activity) before its delivery runs on the
// type's queue, and a reserve that holds nothing (due by the engine, not yet by the database)
// waits a moment, never spins and schedules no delivery.
func TestTimerBucketBatchesUntilEmpty(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
	start := env.Now()
	bucket := start.Add(10 * time.Second).Truncate(time.Second)
	var reserves []reserve
	reserveAnswers := []contract.ReserveTimerBatchResult{
		{Reserved: workflows.TimerBucketBatch},
		{Reserved: 10},
		{NextDue: bucket.Add(700 * time.Millisecond)}, // due by the engine, not yet by the database
		{Reserved: 5},
	}
	reserveBatches(env, &reserves, func(n int) (contract.ReserveTimerBatchResult, error) { return reserveAnswers[n], nil })
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
		return contract.DeliverTimerBatchResult{}, nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	var calls []time.Time
	var claims []string
	answers := []contract.DeliverTimerBatchResult{
		{Claimed: workflows.TimerBucketBatch, Delivered: workflows.TimerBucketBatch}, // full: another at once
		{Claimed: 10, Delivered: 9, HandedOver: 1, NextDue: bucket.Add(700 * time.Millisecond)},
		{Claimed: 5, Delivered: 5},
	}
	env.OnActivity(contract.DeliverTimerBatchName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
			require.Equal(t, "courier-biz-coupons", activity.GetInfo(ctx).TaskQueue)
			require.Equal(t, "coupons", p.BizType)
			require.Equal(t, bucket.Unix(), p.Bucket)
			calls, claims = append(calls, env.Now()), append(claims, p.Claim)
			last := reserves[len(reserves)-1]
			require.Equal(t, p.Claim, last.claim, "each batch's claim is reserved before its delivery")
			require.Positive(t, last.answer.Reserved, "a delivery is scheduled only for a batch its reserve holds")
			return answers[len(calls)-1], nil
		})
	env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: bucket.Unix()})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.TimerBucketResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, workflows.TimerBucketResult{Batches: 3, Delivered: workflows.TimerBucketBatch + 14, HandedOver: 1}, res)
	require.Len(t, calls, 3)
	require.Len(t, reserves, 4)
	require.False(t, reserves[0].at.Before(bucket), "never before the bucket's second")
	require.Equal(t, calls[0], calls[1], "a full batch is followed at once")
	require.False(t, reserves[2].at.Before(bucket.Add(700*time.Millisecond)), "sleeps until the next fire time")
	require.GreaterOrEqual(t, reserves[3].at.Sub(reserves[2].at), 100*time.Millisecond, "an empty reserve waits a moment, never spins")
	require.Equal(t, reserves[2].claim, reserves[3].claim, "a claim that held nothing is the next batch's")
	require.Len(t, map[string]bool{claims[0]: true, claims[1]: true, claims[2]: true}, 3, "a claim per batch")
}

// A bucket woken when its second begins, before the fire times of its timers (they fall due
// within the second), schedules no delivery on the type's queue until a reserve holds them: it
// waits for the next fire time on the workflows' queue. Otherwise a delivery scheduled with
// nothing reserved, held by a pause of the type, would leave the second's timers scheduled (and
// cancellable) for as long as the pause lasts, where a timer of its own reads firing. A bucket
// whose timers are all gone (cancelled, rescheduled) ends without a delivery.
func TestTimerBucketReservesBeforeItDelivers(t *testing.T) {
	t.Run("due within the second", func(t *testing.T) {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
		bucket := env.Now().Add(10 * time.Second).Truncate(time.Second)
		first := bucket.Add(600 * time.Millisecond)
		var reserves []reserve
		reserveBatches(env, &reserves, func(n int) (contract.ReserveTimerBatchResult, error) {
			if env.Now().Before(first) {
				return contract.ReserveTimerBatchResult{NextDue: first}, nil
			}
			return contract.ReserveTimerBatchResult{Reserved: 3}, nil
		})
		var delivered []time.Time
		env.RegisterActivityWithOptions(func(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
			delivered = append(delivered, env.Now())
			require.Equal(t, reserves[len(reserves)-1].claim, p.Claim)
			return contract.DeliverTimerBatchResult{Claimed: 3, Delivered: 3}, nil
		}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
		env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: bucket.Unix()})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		require.Len(t, reserves, 2, "reserved at the second's start, and again at the first fire time")
		require.Equal(t, bucket, reserves[0].at)
		require.False(t, reserves[1].at.Before(first))
		require.Len(t, delivered, 1, "no delivery for the reserve that held nothing")
		require.False(t, delivered[0].Before(first), "the delivery waits on the workflows' queue for the timers to be due")
	})
	t.Run("empty", func(t *testing.T) {
		var s testsuite.WorkflowTestSuite
		env := s.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
		reserveBatches(env, nil, reserveAlways(contract.ReserveTimerBatchResult{}, nil))
		env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
			t.Error("a bucket with nothing left schedules no delivery")
			return contract.DeliverTimerBatchResult{}, nil
		}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
		env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: env.Now().Unix()})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		var res workflows.TimerBucketResult
		require.NoError(t, env.GetWorkflowResult(&res))
		require.Zero(t, res.Batches)
	})
}

// A bucket with more batches than one run may hold continues as new for the rest.
func TestTimerBucketContinuesAsNew(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
	reserveBatches(env, nil, reserveAlways(contract.ReserveTimerBatchResult{Reserved: workflows.TimerBucketBatch}, nil))
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
		return contract.DeliverTimerBatchResult{Claimed: workflows.TimerBucketBatch}, nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: env.Now().Unix()})
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()))
}

// A bucket whose type is gone ends with the refusal (its reserve's, or its batch's if the type
// went in between) instead of retrying it forever.
func TestTimerBucketUnknownType(t *testing.T) {
	for name, reserveErr := range map[string]error{
		"reserve": temporal.NewNonRetryableApplicationError("no such type", contract.ErrTypeUnknownBizType, nil),
		"batch":   nil,
	} {
		t.Run(name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
			reserveBatches(env, nil, reserveAlways(contract.ReserveTimerBatchResult{Reserved: 1}, reserveErr))
			env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
				return contract.DeliverTimerBatchResult{}, temporal.NewNonRetryableApplicationError("no such type", contract.ErrTypeUnknownBizType, nil)
			}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
			env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "gone", Bucket: env.Now().Unix()})
			require.True(t, env.IsWorkflowCompleted())
			require.ErrorContains(t, env.GetWorkflowError(), "no such type")
		})
	}
}
