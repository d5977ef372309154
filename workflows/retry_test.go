package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

func TestRetryPolicyTemporal(t *testing.T) {
	r := courier.RetryPolicy{InitialInterval: time.Second, BackoffCoef: 3, MaxInterval: time.Minute, MaxAttempts: 4, AttemptTimeout: time.Hour}
	require.Equal(t, &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 3, MaximumInterval: time.Minute,
		MaximumAttempts: 4, NonRetryableErrorTypes: []string{"A", "B"}}, workflows.TemporalRetry(r, "A", "B"))
	require.Nil(t, workflows.TemporalRetry(r).NonRetryableErrorTypes, "no error types: none listed")
}

// retriesOf records the retry policy each activity (local ones included) was scheduled with,
// by activity name, as the workflow's options give it to Temporal.
func retriesOf(env *testsuite.TestWorkflowEnvironment) map[string]*temporal.RetryPolicy {
	r := &retryRecorder{got: map[string]*temporal.RetryPolicy{}}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{r}})
	return r.got
}

type retryRecorder struct {
	interceptor.WorkerInterceptorBase
	got map[string]*temporal.RetryPolicy
}

func (r *retryRecorder) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &retryInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, got: r.got}
}

type retryInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	got map[string]*temporal.RetryPolicy
}

func (i *retryInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&retryOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, got: i.got})
}

type retryOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	got map[string]*temporal.RetryPolicy
}

func (o *retryOutbound) ExecuteActivity(ctx workflow.Context, name string, args ...any) workflow.Future {
	o.got[name] = workflow.GetActivityOptions(ctx).RetryPolicy
	return o.Next.ExecuteActivity(ctx, name, args...)
}

func (o *retryOutbound) ExecuteLocalActivity(ctx workflow.Context, name string, args ...any) workflow.Future {
	o.got[name] = workflow.GetLocalActivityOptions(ctx).RetryPolicy
	return o.Next.ExecuteLocalActivity(ctx, name, args...)
}

// The retry policies the workflows schedule their activities with are the ones recorded
// histories were made with: a change here changes what every new run does.
func TestWorkflowsScheduleTheirRetryPolicies(t *testing.T) {
	untilDone := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute}

	t.Run("outbox", func(t *testing.T) {
		env := newEnv(t)
		got := retriesOf(env)
		// The first, local attempt fails on the way; the activity then fails for good.
		env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).
			Return(contract.DeliverResult{}, errors.New("broker unavailable")).Once()
		env.OnActivity(contract.DeliverOutboxName, mock.Anything, mock.Anything).
			Return(contract.DeliverResult{}, temporal.NewNonRetryableApplicationError("x", contract.ErrTypeUnknownTopic, nil))
		env.ExecuteWorkflow(courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{Source: "default", ID: 7, Retry: budget})
		require.True(t, env.IsWorkflowCompleted())
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 4, NonRetryableErrorTypes: []string{contract.ErrTypeUnknownTopic, contract.ErrTypeOutboxNotFound, contract.ErrTypeUnknownSource}},
			got[contract.DeliverOutboxName], "the activity has the budget left after the local attempt and its backoff")
		require.Equal(t, untilDone, got[contract.MarkOutboxDeadName])
	})

	t.Run("timer", func(t *testing.T) {
		env := newTimerEnv(t, nil)
		got := retriesOf(env.TestWorkflowEnvironment)
		env.run(t, time.Minute)
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 1, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 3, NonRetryableErrorTypes: []string{contract.ErrTypePermanentDelivery, contract.ErrTypeUnknownBizType}},
			got[contract.DeliverTimerName])
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			NonRetryableErrorTypes: []string{contract.ErrTypeUnknownBizType}}, got[contract.LoadBizTypeName])
	})

	t.Run("row timer", func(t *testing.T) {
		env := newRowEnv(t, time.Minute, nil)
		got := retriesOf(env.TestWorkflowEnvironment)
		env.run(t)
		row := &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
			NonRetryableErrorTypes: []string{contract.ErrTypeUnknownBizType}}
		require.Equal(t, row, got[contract.ClaimTimerRunName])
		require.Equal(t, row, got[contract.FinishTimerRunName])
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: 10 * time.Second, BackoffCoefficient: 1, MaximumInterval: 10 * time.Second,
			MaximumAttempts: 3, NonRetryableErrorTypes: []string{contract.ErrTypePermanentDelivery, contract.ErrTypeUnknownBizType}},
			got[contract.DeliverTimerName])
	})

	t.Run("task", func(t *testing.T) {
		env := newTaskEnv(t)
		got := retriesOf(env.TestWorkflowEnvironment)
		env.onPush(accepted)
		env.run(t, attempt3) // the deadline passes: the run records the timeout
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			MaximumAttempts: courier.PushTries, NonRetryableErrorTypes: []string{contract.ErrTypePushFailed, contract.ErrTypeTaskStale}},
			got[contract.SendPushName])
		require.Equal(t, untilDone, got[contract.FinishTaskName])
	})

	t.Run("task with a heartbeat timeout", func(t *testing.T) {
		env := newTaskEnv(t)
		got := retriesOf(env.TestWorkflowEnvironment)
		env.onPushAwait(completed(contract.AttemptResult{Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}))
		env.run(t, attempt3Heartbeat)
		require.Equal(t, &temporal.RetryPolicy{MaximumAttempts: 1}, got[contract.PushAwaitName])
		require.Equal(t, untilDone, got[contract.FinishTaskName])
	})

	t.Run("sweeper", func(t *testing.T) {
		env := newTaskEnv(t)
		got := retriesOf(env.TestWorkflowEnvironment)
		env.ExecuteWorkflow(courier.KindTaskSweeper.Workflow, contract.SweepParams{})
		require.True(t, env.IsWorkflowCompleted())
		require.NoError(t, env.GetWorkflowError())
		require.Equal(t, &temporal.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: 3}, got[contract.SweepTasksName])
	})
}
