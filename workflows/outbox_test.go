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
	env.RegisterWorkflowWithOptions(workflows.OutboxDelivery, workflow.RegisterOptions{Name: courier.KindOutbox.Workflow})
	env.RegisterActivityWithOptions(func(context.Context, contract.DeliverParams) (contract.DeliverResult, error) {
		return contract.DeliverResult{}, nil
	}, activity.RegisterOptions{Name: contract.DeliverOutboxName})
	env.RegisterActivityWithOptions(func(context.Context, contract.MarkDeadParams) error { return nil },
		activity.RegisterOptions{Name: contract.MarkOutboxDeadName})
	return env
}

var budget = courier.RetryPolicy{InitialInterval: time.Second, BackoffCoef: 2, MaxInterval: 10 * time.Second, MaxAttempts: 5}

func TestOutboxDeliverySuccess(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).
		Return(func(context.Context, contract.MarkDeadParams) error {
			t.Error("a delivered record must not be marked dead")
			return nil
		}).Maybe()
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, contract.DeliverParams{Source: "default", ID: 7}).
		Return(contract.DeliverResult{}, nil).Once()
	env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, courier.OutboxSent, res.Status)
	env.AssertExpectations(t)
}

// attemptKinds records how each attempt ran: "local" or "activity".
func attemptKind(ctx context.Context) string {
	if activity.GetInfo(ctx).IsLocalActivity {
		return "local"
	}
	return "activity"
}

// Transient failures are retried with the budget's backoff until a publish succeeds: the first
// attempt is local and the others are the activity's tries, with the budget's waits between
// them (virtual time). The waits double from the initial interval and stop growing at the
// longest wait.
func TestOutboxDeliveryRetriesWithBackoff(t *testing.T) {
	capped := budget
	capped.MaxInterval = 1500 * time.Millisecond
	for _, c := range []struct {
		name  string
		retry courier.RetryPolicy
		waits []time.Duration
	}{
		{"doubling", budget, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"capped", capped, []time.Duration{time.Second, 1500 * time.Millisecond, 1500 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
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
			env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: 1, Retry: c.retry})
			require.NoError(t, env.GetWorkflowError())
			var res workflows.OutboxDeliveryResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, courier.OutboxSent, res.Status)
			require.Len(t, at, 4)
			for i, want := range c.waits {
				got := at[i+1].Sub(at[i])
				require.InDelta(t, want.Seconds(), got.Seconds(), 0.2, "wait before attempt %d", i+2)
			}
			require.Equal(t, []string{"local", "activity", "activity", "activity"}, kinds)
		})
	}
}

// A record published at the first attempt is published by a local activity, bounded by
// LocalAttemptTimeout (the budget's attempt timeout is 30 s here) and carrying the budget's
// first backoff (the attempt reports it as the record's next attempt time if it fails). That
// the run then ends in the workflow task that started it, with one marker, is what the recorded
// outbox-delivery/sent.json history shows.
func TestOutboxDeliveryFirstAttemptIsLocal(t *testing.T) {
	env := newEnv(t)
	var info activity.Info
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, contract.DeliverParams{Source: "default", ID: 7}).Return(
		func(ctx context.Context, _ contract.DeliverParams) (contract.DeliverResult, error) {
			info = activity.GetInfo(ctx)
			return contract.DeliverResult{}, nil
		}).Once()
	env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget})
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, courier.OutboxSent, res.Status)
	require.True(t, info.IsLocalActivity)
	require.NotNil(t, info.RetryPolicy)
	require.Equal(t, int32(1), info.RetryPolicy.MaximumAttempts, "one local attempt; the rest of the budget is the activity's")
	require.Equal(t, budget.InitialInterval, info.RetryPolicy.InitialInterval)
	require.Equal(t, 30*time.Second, workflows.OutboxRetry(budget).AttemptTimeout)
	require.WithinDuration(t, info.StartedTime.Add(workflows.LocalAttemptTimeout), info.Deadline, time.Second)
	env.AssertExpectations(t)
}

// After the budget the record is marked dead with the last error: exactly MaxAttempts attempts
// (one local, then the activity's), and a budget of one attempt makes only the local one.
func TestOutboxDeliveryDeadAfterBudget(t *testing.T) {
	for _, attempts := range []int{5, 2, 1} {
		t.Run(fmt.Sprintf("%d-attempts", attempts), func(t *testing.T) {
			env := newEnv(t)
			var (
				kinds []string
				at    []time.Time
			)
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(
				func(ctx context.Context, _ contract.DeliverParams) (contract.DeliverResult, error) {
					kinds = append(kinds, attemptKind(ctx))
					at = append(at, env.Now())
					return contract.DeliverResult{}, errors.New("broker unavailable")
				})
			var dead contract.MarkDeadParams
			env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).Return(
				func(_ context.Context, p contract.MarkDeadParams) error { dead = p; return nil }).Once()
			start := env.Now()
			b := budget
			b.MaxAttempts = attempts
			env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: 9, Retry: b})
			res := deadResult(t, env)
			require.Equal(t, courier.OutboxDead, res.Status)
			require.Len(t, kinds, int(attempts), "exactly MaxAttempts attempts")
			require.Equal(t, "local", kinds[0])
			for _, k := range kinds[1:] {
				require.Equal(t, "activity", k)
			}
			require.Equal(t, int64(9), dead.ID)
			require.Contains(t, dead.LastError, "broker unavailable")
			require.Contains(t, res.LastError, "broker unavailable")
			// The budget's waits passed in virtual time, and no other: 1, 2, 4, 8 s.
			var waited time.Duration
			for i, w := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}[:attempts-1] {
				waited += w
				require.InDelta(t, w.Seconds(), at[i+1].Sub(at[i]).Seconds(), 0.2, "wait before attempt %d", i+2)
			}
			require.InDelta(t, waited.Seconds(), env.Now().Sub(start).Seconds(), 0.5)
		})
	}
}

// A permanent failure is not retried: dead at once, without a wait. An error is permanent when the activity marks it non-retryable (a refused message) or when its
// type is one the policy lists (no stream for the topic), either alone.
func TestOutboxDeliveryPermanentFailureIsDeadAtOnce(t *testing.T) {
	cause := errors.New("mq: no destination for topic orders.x")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		// As the activity reports it: the publisher's error as the message and the cause.
		{"unknown topic", temporal.NewNonRetryableApplicationError(cause.Error(), contract.ErrTypeUnknownTopic, cause), cause.Error()},
		{"flag alone", temporal.NewNonRetryableApplicationError("refused, never published: bad header", contract.ErrTypeRefusedMessage, nil), "refused, never published: bad header"},
		{"listed type alone", temporal.NewApplicationError("record 3 not found", contract.ErrTypeOutboxNotFound), "record 3 not found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := newEnv(t)
			calls := 0
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(
				func(context.Context, contract.DeliverParams) (contract.DeliverResult, error) {
					calls++
					return contract.DeliverResult{}, c.err
				})
			env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).Return(nil).Once()
			start := env.Now()
			env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: 3, Retry: budget})
			res := deadResult(t, env)
			require.Equal(t, courier.OutboxDead, res.Status)
			require.Equal(t, 1, calls)
			require.Equal(t, c.want, res.LastError, "the reason says its cause once")
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
	env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: 3, Retry: budget})
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
	require.Equal(t, workflows.DefaultOutboxRetry, workflows.OutboxRetry(courier.RetryPolicy{}))
	custom := workflows.OutboxRetry(courier.RetryPolicy{MaxAttempts: 3})
	require.Equal(t, 3, custom.MaxAttempts)
	require.Equal(t, time.Second, custom.InitialInterval)
}

// A run started as the relay starts them now (QuietSuccess, with FinalState for older workers)
// writes no CourierState for a sent record, its Completed status says it (one event and one
// billable action less per record), and writes "dead" for a dead one and "pending" for one
// that met a paused topic. Runs started with FinalState only wrote "sent" for a sent record,
// runs started before FinalState (recorded histories) nothing.
func TestOutboxDeliveryStateUpserts(t *testing.T) {
	for _, c := range []struct {
		name       string
		fail       bool
		paused     bool
		finalState bool
		quiet      bool
		want       []string
	}{
		{"sent", false, false, true, true, nil},
		{"dead", true, false, true, true, []string{string(courier.OutboxDead)}},
		{"paused", false, true, true, true, []string{string(courier.OutboxPending)}},
		{"sent, QuietSuccess alone", false, false, false, true, nil},
		{"paused, QuietSuccess alone", false, true, false, true, []string{string(courier.OutboxPending)}},
		{"sent, started with FinalState only", false, false, true, false, []string{string(courier.OutboxSent)}},
		{"dead, started with FinalState only", true, false, true, false, []string{string(courier.OutboxDead)}},
		{"sent, started before FinalState", false, false, false, false, nil},
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
			env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).Return(contract.DeliverResult{Paused: c.paused}, err)
			env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: 3, Retry: budget,
				FinalState: c.finalState, QuietSuccess: c.quiet})
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

// A delivery whose topic is paused ends at once: the record is pending again (the activity
// held it), nothing is marked dead and no further attempt is made.
func TestOutboxDeliveryPaused(t *testing.T) {
	env := newEnv(t)
	env.OnActivity(contract.MarkOutboxDeadName, mock.Anything, mock.Anything).
		Return(func(context.Context, contract.MarkDeadParams) error {
			t.Error("a paused record must not be marked dead")
			return nil
		}).Maybe()
	env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).
		Return(contract.DeliverResult{Paused: true}, nil).Once()
	env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget, FinalState: true})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.OutboxDeliveryResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.True(t, res.Paused)
	require.Equal(t, courier.OutboxPending, res.Status)
	env.AssertExpectations(t)
}
