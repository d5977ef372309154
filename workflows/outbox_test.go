package workflows_test

import (
	"context"
	"errors"
	"fmt"
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

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.OutboxDelivery, workflow.RegisterOptions{Name: workflows.OutboxDeliveryName})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverParams) (contract.DeliverResult, error) {
		return contract.DeliverResult{}, nil
	}, activity.RegisterOptions{Name: contract.DeliverOutboxName})
	env.RegisterActivityWithOptions(func(context.Context, contract.MarkDeadParams) error { return nil },
		activity.RegisterOptions{Name: contract.MarkOutboxDeadName})
	return env
}

var budget = workflows.RetryPolicy{InitialInterval: time.Second, BackoffCoef: 2, MaxInterval: 10 * time.Second, MaxAttempts: 5}

func TestOutboxDeliverySuccess(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).
		Return(func(context.Context, contract.MarkDeadParams) error {
			t.Error("a delivered record must not be marked dead")
			return nil
		}).Maybe()
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, contract.DeliverParams{Source: "default", ID: 7}).
		Return(contract.DeliverResult{}, nil).Once()
	env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, courier.OutboxSent, res.Status)
	env.AssertExpectations(t)
}

// versions are the delivery code versions whose runs a worker still runs: those started before
// versions existed, and each version since.
var versions = []int{0, workflows.OutboxInputV, workflows.OutboxLocalFirstV}

// attemptKinds records how each attempt ran: "local" or "activity".
func attemptKind(ctx context.Context) string {
	if activity.GetInfo(ctx).IsLocalActivity {
		return "local"
	}
	return "activity"
}

// Transient failures are retried with exponential backoff (1 s, 2 s, 4 s of virtual time)
// until a publish succeeds, whichever version runs: from OutboxLocalFirstV the first attempt is
// local and the others are the activity's tries, with the same waits between them.
func TestOutboxDeliveryRetriesWithBackoff(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			env := newEnv(t)
			var (
				at    []time.Time
				kinds []string
			)
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, p contract.DeliverParams) (contract.DeliverResult, error) {
					at = append(at, env.Now())
					kinds = append(kinds, attemptKind(ctx))
					if len(at) < 4 {
						return contract.DeliverResult{}, errors.New("broker unavailable")
					}
					return contract.DeliverResult{}, nil
				})
			env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{ID: 1, Retry: budget, V: v})
			require.NoError(t, env.GetWorkflowError())
			var res workflows.OutboxDeliveryResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, courier.OutboxSent, res.Status)
			require.Len(t, at, 4)
			for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
				got := at[i+1].Sub(at[i])
				require.InDelta(t, want.Seconds(), got.Seconds(), 0.5, "wait before attempt %d", i+2)
			}
			want := []string{"activity", "activity", "activity", "activity"}
			if v >= workflows.OutboxLocalFirstV {
				want[0] = "local"
			}
			require.Equal(t, want, kinds)
		})
	}
}

// From OutboxLocalFirstV a record published at the first attempt is published by a local
// activity, which carries the budget's attempt timeout and first backoff (the attempt reports
// the latter as the record's next attempt time if it fails), and the run ends in the workflow
// task that started it.
func TestOutboxDeliveryFirstAttemptIsLocal(t *testing.T) {
	env := newEnv(t)
	var info activity.Info
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, contract.DeliverParams{Source: "default", ID: 7}).Return(
		func(ctx context.Context, _ contract.DeliverParams) (contract.DeliverResult, error) {
			info = activity.GetInfo(ctx)
			return contract.DeliverResult{}, nil
		}).Once()
	env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget, V: workflows.OutboxLocalFirstV})
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, courier.OutboxSent, res.Status)
	require.True(t, info.IsLocalActivity)
	require.NotNil(t, info.RetryPolicy)
	require.Equal(t, int32(1), info.RetryPolicy.MaximumAttempts, "one local attempt; the rest of the budget is the activity's")
	require.Equal(t, budget.InitialInterval, info.RetryPolicy.InitialInterval)
	require.WithinDuration(t, info.StartedTime.Add(workflows.RetryPolicy(budget).WithDefaults().AttemptTimeout), info.Deadline, time.Second)
	env.AssertExpectations(t)
}

// After the budget the record is marked dead with the last error: exactly MaxAttempts attempts
// in every version (from OutboxLocalFirstV one local, then the activity's), and a budget of
// one attempt makes only the local one.
func TestOutboxDeliveryDeadAfterBudget(t *testing.T) {
	for _, c := range []struct {
		v        int
		attempts int32
	}{{0, 5}, {workflows.OutboxInputV, 5}, {workflows.OutboxLocalFirstV, 5}, {workflows.OutboxLocalFirstV, 1}, {workflows.OutboxLocalFirstV, 2}} {
		t.Run(fmt.Sprintf("v%d/%d-attempts", c.v, c.attempts), func(t *testing.T) {
			env := newEnv(t)
			var kinds []string
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ contract.DeliverParams) (contract.DeliverResult, error) {
					kinds = append(kinds, attemptKind(ctx))
					return contract.DeliverResult{}, errors.New("broker unavailable")
				})
			var dead contract.MarkDeadParams
			env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).Return(
				func(_ context.Context, p contract.MarkDeadParams) error { dead = p; return nil }).Once()
			start := env.Now()
			b := budget
			b.MaxAttempts = c.attempts
			env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{ID: 9, Retry: b, V: c.v})
			res := deadResult(t, env)
			require.Equal(t, courier.OutboxDead, res.Status)
			require.Len(t, kinds, int(c.attempts), "exactly MaxAttempts attempts")
			if c.v >= workflows.OutboxLocalFirstV {
				require.Equal(t, "local", kinds[0])
				for _, k := range kinds[1:] {
					require.Equal(t, "activity", k)
				}
			}
			require.Equal(t, int64(9), dead.ID)
			require.Contains(t, dead.LastError, "broker unavailable")
			require.Contains(t, res.LastError, "broker unavailable")
			if c.attempts == 5 {
				// 1+2+4+8 s of backoff passed in virtual time.
				require.GreaterOrEqual(t, env.Now().Sub(start), 15*time.Second)
			}
		})
	}
}

// A permanent failure (no stream for the topic) is not retried: dead at once, in every version.
func TestOutboxDeliveryPermanentFailureIsDeadAtOnce(t *testing.T) {
	for _, v := range versions {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			env := newEnv(t)
			calls := 0
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(
				func(context.Context, contract.DeliverParams) (contract.DeliverResult, error) {
					calls++
					// As the activity reports it: the publisher's error as the message and the cause.
					cause := errors.New("mq: no destination for topic orders.x")
					return contract.DeliverResult{}, temporal.NewNonRetryableApplicationError(cause.Error(), contract.ErrTypeUnknownTopic, cause)
				})
			env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).Return(nil).Once()
			start := env.Now()
			env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{ID: 3, Retry: budget, V: v})
			res := deadResult(t, env)
			require.Equal(t, courier.OutboxDead, res.Status)
			require.Equal(t, 1, calls)
			require.Equal(t, "mq: no destination for topic orders.x", res.LastError, "the reason says its cause once")
			require.Less(t, env.Now().Sub(start), budget.InitialInterval, "no backoff before a permanent failure goes dead")
		})
	}
}

// Marking dead is retried until the database answers; the workflow does not give up on it.
func TestOutboxDeliveryMarkDeadIsRetried(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).
		Return(contract.DeliverResult{}, temporal.NewNonRetryableApplicationError("x", contract.ErrTypeUnknownTopic, nil))
	calls := 0
	env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).Return(
		func(context.Context, contract.MarkDeadParams) error {
			calls++
			if calls < 3 {
				return errors.New("database down")
			}
			return nil
		})
	env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{ID: 3, Retry: budget})
	res := deadResult(t, env)
	require.Equal(t, courier.OutboxDead, res.Status)
	require.Equal(t, 3, calls)
}

// deadResult checks that a dead record's run failed (the Temporal UI lists it under Failures)
// with the record's last error as the message, and returns the result its details carry.
func deadResult(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.OutboxDeliveryResult {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app, "a dead record's run fails")
	require.Equal(t, workflows.ErrTypeOutboxDead, app.Type())
	require.True(t, app.NonRetryable())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, app.Details(&res))
	require.Equal(t, res.LastError, app.Message(), "the failure message is the reason")
	return res
}

func TestRetryPolicyDefaults(t *testing.T) {
	require.Equal(t, workflows.DefaultOutboxRetry, workflows.RetryPolicy{}.WithDefaults())
	custom := workflows.RetryPolicy{MaxAttempts: 3}.WithDefaults()
	require.Equal(t, int32(3), custom.MaxAttempts)
	require.Equal(t, time.Second, custom.InitialInterval)
}

// A run the relay started with OutboxInputV or later writes no state for a sent record (its run
// completes) and still writes "dead" for a dead one; runs without it (started by older
// relays) also write "sent".
func TestOutboxDeliveryStateUpserts(t *testing.T) {
	for _, c := range []struct {
		name string
		v    int
		fail bool
		want []string
	}{
		{"sent", workflows.OutboxInputV, false, nil},
		{"dead", workflows.OutboxInputV, true, []string{string(courier.OutboxDead)}},
		{"sent, local first", workflows.OutboxLocalFirstV, false, nil},
		{"dead, local first", workflows.OutboxLocalFirstV, true, []string{string(courier.OutboxDead)}},
		{"sent before V", 0, false, []string{string(courier.OutboxSent)}},
		{"dead before V", 0, true, []string{string(courier.OutboxDead)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newEnv(t)
			var states []string
			env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
				v, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(stateKey)
				require.True(t, ok)
				states = append(states, v)
			}).Maybe()
			var err error
			if c.fail {
				err = temporal.NewNonRetryableApplicationError("x", contract.ErrTypeUnknownTopic, nil)
			}
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(contract.DeliverResult{}, err)
			env.ExecuteWorkflow(workflows.OutboxDeliveryName, workflows.OutboxDeliveryParams{ID: 3, Retry: budget, V: c.v})
			require.True(t, env.IsWorkflowCompleted())
			if c.fail {
				require.Equal(t, courier.OutboxDead, deadResult(t, env).Status)
			} else {
				require.NoError(t, env.GetWorkflowError())
			}
			require.Equal(t, c.want, states)
		})
	}
}
