package workflows

import (
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// localPushAttempt runs an attempt of TaskLocalPushV. The push is a local activity, in the
// workflow task that starts the run (its tries within the attempt, as the activity of
// TaskPushAwaitV makes them); then the run itself waits, on a timer for the processing
// deadline, for the worker's result, which the gateway hands over as TaskResultUpdate after it
// has recorded it in the row and answered the worker (so a worker that reports before it
// answers the push never waits on this run's open workflow task). There is no activity, so a
// successful attempt costs the engine two workflow tasks and no activity task. A result the
// gateway could not record is recorded here, as are a timeout, a cancel and a push that failed. The claimer starts such runs only for attempts
// without a heartbeat timeout: a heartbeat extends an activity's heartbeat timeout, and this
// run has no activity to extend.
func localPushAttempt(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	processing, pushTimeout := p.timeouts()
	deadline := workflow.Now(ctx).Add(processing)

	var (
		recorded *TaskResultParams       // recorded in the row by the gateway
		reported *courier.AttemptOutcome // not recorded: the run records it
		over     bool
	)
	reports := workflow.NewBufferedChannel(ctx, 1)
	refuse := func(r TaskResultParams) error {
		if r.Attempt != p.Attempt || over || reported != nil || recorded != nil {
			return temporal.NewApplicationError(fmt.Sprintf("attempt %d is no longer running", r.Attempt), ErrTypeAttemptOver)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, TaskResultUpdate,
		func(ctx workflow.Context, r TaskResultParams) error {
			if err := refuse(r); err != nil {
				return err
			}
			if r.Outcome.Recorded {
				recorded = &r
			} else {
				o := r.Outcome
				reported = &o
			}
			reports.SendAsync(true)
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r TaskResultParams) error { return refuse(r) }},
	); err != nil {
		return TaskRunResult{}, err
	}

	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: processing,
		StartToCloseTimeout:    pushTimeout + pushTryMargin,
		RetryPolicy:            pushRetry.Temporal(pushNonRetryable...),
	})
	pushErr := workflow.ExecuteLocalActivity(lctx, contract.SendPushName, contract.PushTaskParams{TaskID: p.TaskID,
		Version: p.Version, Attempt: p.Attempt, ProcessingTimeout: processing, Deadline: deadline,
		PushTimeout: pushTimeout, V: p.V}).Get(ctx, nil)
	// A result that reached the run while it pushed is the attempt's, whatever the push's own
	// answer: the worker had the task.
	var out courier.AttemptOutcome
	switch {
	case recorded != nil || reported != nil:
	case pushErr != nil:
		over = true
		var app *temporal.ApplicationError
		var to *temporal.TimeoutError
		switch {
		case errors.As(pushErr, &app) && app.Type() == contract.ErrTypeTaskStale:
			return TaskRunResult{Stale: true}, nil
		case temporal.IsCanceledError(pushErr) || ctx.Err() != nil:
			out = courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}
		case errors.As(pushErr, &to) && to.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
			out = courier.AttemptOutcome{Kind: courier.OutcomeTimeout,
				Message: fmt.Sprintf("processing timeout: the push was not accepted within %s", processing)}
		case errors.As(pushErr, &to):
			out = courier.AttemptOutcome{Kind: courier.OutcomeFailure,
				Message: fmt.Sprintf("push: no answer within the push timeout (%s)", pushTimeout)}
		default:
			out = courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(pushErr)}
		}
		return finishAttemptLocally(ctx, p, out)
	default:
		timedOut := false
		if remaining := deadline.Sub(workflow.Now(ctx)); remaining > 0 {
			timer := workflow.NewTimer(ctx, remaining)
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(reports, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
			sel.AddFuture(timer, func(f workflow.Future) { timedOut = f.Get(ctx, nil) == nil })
			for recorded == nil && reported == nil && !timedOut && ctx.Err() == nil {
				sel.Select(ctx)
			}
		} else {
			timedOut = true
		}
		switch {
		case recorded != nil || reported != nil:
		case ctx.Err() != nil:
			over = true
			return finishAttemptLocally(ctx, p, courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"})
		default:
			over = true
			return finishAttemptLocally(ctx, p, courier.AttemptOutcome{Kind: courier.OutcomeTimeout,
				Message: fmt.Sprintf("processing timeout: no result within %s", processing)})
		}
	}
	over = true
	if reported != nil {
		return finishAttemptLocally(ctx, p, workerOutcome(*reported))
	}
	out = recorded.Outcome
	out.Recorded = true
	return attemptFinished(ctx, p, out, contract.FinishTaskResult{Applied: true, Status: recorded.Status})
}
