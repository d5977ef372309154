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

// A bucket sleeps until its second begins, takes full batches one after another, sleeps until
// the next fire time the batch reports, and ends when none is left; every batch has a claim of
// its own and runs on the type's queue.
func TestTimerBucketBatchesUntilEmpty(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
		return contract.DeliverTimerBatchResult{}, nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	start := env.Now()
	bucket := start.Add(10 * time.Second).Truncate(time.Second)
	var calls []time.Time
	var claims []string
	answers := []contract.DeliverTimerBatchResult{
		{Claimed: workflows.TimerBucketBatch, Delivered: workflows.TimerBucketBatch}, // full: another at once
		{Claimed: 10, Delivered: 9, HandedOver: 1, NextDue: bucket.Add(700 * time.Millisecond)},
		{Claimed: 0, NextDue: bucket.Add(700 * time.Millisecond)}, // due by the engine, not yet by the database
		{Claimed: 5, Delivered: 5},
	}
	env.OnActivity(contract.DeliverTimerBatchName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
			require.Equal(t, "courier-biz-coupons", activity.GetInfo(ctx).TaskQueue)
			require.Equal(t, "coupons", p.BizType)
			require.Equal(t, bucket.Unix(), p.Bucket)
			calls, claims = append(calls, env.Now()), append(claims, p.Claim)
			return answers[len(calls)-1], nil
		})
	env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: bucket.Unix()})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.TimerBucketResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, workflows.TimerBucketResult{Batches: 4, Delivered: workflows.TimerBucketBatch + 14, HandedOver: 1}, res)
	require.Len(t, calls, 4)
	require.False(t, calls[0].Before(bucket), "never before the bucket's second")
	require.Equal(t, calls[0], calls[1], "a full batch is followed at once")
	require.False(t, calls[2].Before(bucket.Add(700*time.Millisecond)), "sleeps until the next fire time")
	require.GreaterOrEqual(t, calls[3].Sub(calls[2]), 100*time.Millisecond, "an empty claim waits a moment, never spins")
	require.Len(t, map[string]bool{claims[0]: true, claims[1]: true, claims[2]: true, claims[3]: true}, 4, "a claim per batch")
}

// A bucket with more batches than one run may hold continues as new for the rest.
func TestTimerBucketContinuesAsNew(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
		return contract.DeliverTimerBatchResult{Claimed: workflows.TimerBucketBatch}, nil
	}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "coupons", Bucket: env.Now().Unix()})
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, workflow.IsContinueAsNewError(env.GetWorkflowError()))
}

// A bucket whose type is gone ends with the batch's refusal instead of retrying it forever.
func TestTimerBucketUnknownType(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
		return contract.DeliverTimerBatchResult{}, temporal.NewNonRetryableApplicationError("no such type", contract.ErrTypeUnknownBizType, nil)
	}, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	env.ExecuteWorkflow(courier.KindTimerBucket.Workflow, workflows.TimerBucketParams{BizType: "gone", Bucket: env.Now().Unix()})
	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), "no such type")
}
