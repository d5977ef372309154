package workflows_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

func newBatchEnv(t *testing.T, publish func(context.Context, contract.BatchParams) (contract.BatchResult, error), handed *[]contract.HandParams) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.OutboxBatch, workflow.RegisterOptions{Name: courier.KindOutboxBatch.Workflow})
	env.RegisterActivityWithOptions(publish, activity.RegisterOptions{Name: contract.PublishOutboxBatchName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.HandParams) error {
		*handed = append(*handed, p)
		return nil
	}, activity.RegisterOptions{Name: contract.HandOutboxBatchName})
	return env
}

// A batch is one publish activity; what it reports is the run's result, and nothing is handed
// over.
func TestOutboxBatchPublishes(t *testing.T) {
	var handed []contract.HandParams
	var got contract.BatchParams
	env := newBatchEnv(t, func(_ context.Context, p contract.BatchParams) (contract.BatchResult, error) {
		got = p
		return contract.BatchResult{Sent: 2, Handed: []int64{3}}, nil
	}, &handed)
	env.ExecuteWorkflow(courier.KindOutboxBatch.Workflow, workflows.OutboxBatchParams{Source: "s", IDs: []int64{1, 2, 3}, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res contract.BatchResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, contract.BatchResult{Sent: 2, Handed: []int64{3}}, res)
	require.Equal(t, contract.BatchParams{Source: "s", IDs: []int64{1, 2, 3}}, got)
	require.Empty(t, handed)
}

// A publish activity that keeps failing is retried within the budget; once it is spent, every
// record of the batch is handed to a delivery of its own with the reason, and the run completes.
func TestOutboxBatchThatGivesUpHandsEveryRecordOver(t *testing.T) {
	var handed []contract.HandParams
	attempts := 0
	env := newBatchEnv(t, func(context.Context, contract.BatchParams) (contract.BatchResult, error) {
		attempts++
		return contract.BatchResult{}, errors.New("database is down")
	}, &handed)
	env.ExecuteWorkflow(courier.KindOutboxBatch.Workflow, workflows.OutboxBatchParams{Source: "s", IDs: []int64{7, 8}, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.EqualValues(t, budget.MaxAttempts, attempts, "the whole budget is spent first")
	require.Len(t, handed, 1)
	require.Equal(t, []int64{7, 8}, handed[0].IDs)
	require.Equal(t, "s", handed[0].Source)
	require.Contains(t, handed[0].LastError, "database is down")
}

// A non-retryable failure (an unknown source) hands over at once.
func TestOutboxBatchUnknownSourceHandsOverAtOnce(t *testing.T) {
	var handed []contract.HandParams
	attempts := 0
	env := newBatchEnv(t, func(context.Context, contract.BatchParams) (contract.BatchResult, error) {
		attempts++
		return contract.BatchResult{}, temporal.NewNonRetryableApplicationError("no such source", contract.ErrTypeUnknownSource, nil)
	}, &handed)
	env.ExecuteWorkflow(courier.KindOutboxBatch.Workflow, workflows.OutboxBatchParams{Source: "gone", IDs: []int64{1}, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.Equal(t, 1, attempts)
	require.Len(t, handed, 1)
}
