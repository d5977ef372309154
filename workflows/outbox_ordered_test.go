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

// fakeKey is one key's records as the ordered activities see them: ids in commit order, each
// failing its first fail[id] publishes.
type fakeKey struct {
	ids      []int64
	fail     map[int64]int
	attempts map[int64]int
	sent     []int64
	blocked  []contract.BlockOrderedParams
	// sentMeanwhile: the record to block was found sent (it blocks nothing).
	sentMeanwhile bool
}

func (k *fakeKey) env(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.OutboxOrdered, workflow.RegisterOptions{Name: courier.KindOutboxKey.Workflow})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.ClaimOrderedParams) (contract.ClaimOrderedResult, error) {
		if len(k.blocked) > 0 || len(k.ids) == 0 {
			return contract.ClaimOrderedResult{Blocked: len(k.blocked) > 0}, nil
		}
		n := min(p.Max, len(k.ids))
		return contract.ClaimOrderedResult{IDs: append([]int64(nil), k.ids[:n]...), Attempts: k.attempts[k.ids[0]]}, nil
	}, activity.RegisterOptions{Name: contract.ClaimOrderedName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.PublishOrderedParams) (contract.PublishOrderedResult, error) {
		var res contract.PublishOrderedResult
		for _, id := range p.IDs {
			if k.fail[id] > 0 {
				k.fail[id]--
				k.attempts[id]++
				res.FailedID, res.FailedAttempts, res.LastError = id, k.attempts[id], "broker down"
				return res, nil
			}
			k.sent = append(k.sent, id)
			k.ids = k.ids[1:]
			res.Sent++
		}
		return res, nil
	}, activity.RegisterOptions{Name: contract.PublishOrderedName})
	env.RegisterActivityWithOptions(func(_ context.Context, p contract.BlockOrderedParams) (contract.BlockOrderedResult, error) {
		k.blocked = append(k.blocked, p)
		return contract.BlockOrderedResult{Blocked: !k.sentMeanwhile, Topic: "orders.created"}, nil
	}, activity.RegisterOptions{Name: contract.BlockOrderedName})
	return env
}

// A record that fails waits out its backoff and is published again before any record after
// it: the key's records go out in order, each once.
func TestOutboxOrderedRetriesInOrder(t *testing.T) {
	k := &fakeKey{ids: []int64{1, 2, 3, 4, 5}, fail: map[int64]int{3: 2}, attempts: map[int64]int{}}
	env := k.env(t)
	env.ExecuteWorkflow(courier.KindOutboxKey.Workflow, workflows.OutboxOrderedParams{Key: "k", Max: 2, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxOrderedResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, []int64{1, 2, 3, 4, 5}, k.sent)
	require.Equal(t, 5, res.Sent)
	require.Zero(t, res.BlockedBy)
	require.Empty(t, k.blocked)
}

// A record that spends its budget blocks its key: it is marked dead with its error, the
// records after it are never published, and the run ends Failed with the record's id and
// error, its state, record and topic upserted before it closes (so the Temporal UI lists it
// among the failed runs, filtered as a dead record).
func TestOutboxOrderedBlocksTheKey(t *testing.T) {
	k := &fakeKey{ids: []int64{1, 2, 3}, fail: map[int64]int{2: 100}, attempts: map[int64]int{}}
	env := k.env(t)
	var upserts []temporal.SearchAttributes
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
	}).Maybe()
	start := env.Now()
	env.ExecuteWorkflow(courier.KindOutboxKey.Workflow, workflows.OutboxOrderedParams{Key: "k", Max: 10, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	require.Equal(t, workflows.ErrTypeOutboxKeyBlocked, app.Type())
	require.Equal(t, "outbox record 2 is dead and blocks its key: broker down", app.Message())
	require.True(t, app.NonRetryable())
	var res workflows.OutboxOrderedResult
	require.NoError(t, app.Details(&res))
	require.Len(t, upserts, 1, "the state is written once, before the run fails")
	state, _ := upserts[0].GetKeyword(temporal.NewSearchAttributeKeyKeyword(courier.SAState))
	record, _ := upserts[0].GetInt64(temporal.NewSearchAttributeKeyInt64(courier.SARecord))
	topic, _ := upserts[0].GetKeyword(temporal.NewSearchAttributeKeyKeyword(courier.SATopic))
	require.Equal(t, []any{string(courier.OutboxDead), int64(2), "orders.created"}, []any{state, record, topic})
	require.Equal(t, []int64{1}, k.sent)
	require.Equal(t, 1, res.Sent)
	require.Equal(t, int64(2), res.BlockedBy)
	require.Equal(t, []contract.BlockOrderedParams{{ID: 2, LastError: "broker down"}}, k.blocked)
	require.Equal(t, int(budget.MaxAttempts), k.attempts[2], "the whole budget, no more")
	// 1 s + 2 s + 4 s + 8 s of backoff between the five attempts, on the workflow's clock.
	require.GreaterOrEqual(t, env.Now().Sub(start), 15*time.Second)
}

// A record found sent when its key was to be blocked (an attempt that got through after all)
// blocks nothing: the run completes, blocking nothing.
func TestOutboxOrderedSentMeanwhileBlocksNothing(t *testing.T) {
	k := &fakeKey{ids: []int64{1, 2}, fail: map[int64]int{1: 100}, attempts: map[int64]int{}, sentMeanwhile: true}
	env := k.env(t)
	env.ExecuteWorkflow(courier.KindOutboxKey.Workflow, workflows.OutboxOrderedParams{Key: "k", Max: 10, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxOrderedResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Zero(t, res.BlockedBy)
	require.Len(t, k.blocked, 1)
}
