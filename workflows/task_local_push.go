package workflows

import (
	"fmt"

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
// gateway could not record is recorded here, as are a timeout, a cancel and a push that failed.
// The claimer starts such runs only for attempts
// without a heartbeat timeout: a heartbeat extends an activity's heartbeat timeout, and this
// run has no activity to extend.
func localPushAttempt(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	processing, pushTimeout := p.timeouts()
	deadline := workflow.Now(ctx).Add(processing)
	results, err := takeResults(ctx, p.Attempt)
	if err != nil {
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
	if results.got == nil && pushErr != nil {
		results.over = true
		out, stale := pushEnded(ctx, pushErr, processing, pushTimeout)
		if stale {
			return TaskRunResult{Stale: true}, nil
		}
		return finishAttemptLocally(ctx, p, out)
	}
	if results.got == nil {
		timedOut := false
		if remaining := deadline.Sub(workflow.Now(ctx)); remaining > 0 {
			timer := workflow.NewTimer(ctx, remaining)
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(results.ch, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
			sel.AddFuture(timer, func(f workflow.Future) { timedOut = f.Get(ctx, nil) == nil })
			for results.got == nil && !timedOut && ctx.Err() == nil {
				sel.Select(ctx)
			}
		}
		if results.got == nil {
			results.over = true
			if ctx.Err() != nil {
				return finishAttemptLocally(ctx, p, courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"})
			}
			return finishAttemptLocally(ctx, p, courier.AttemptOutcome{Kind: courier.OutcomeTimeout,
				Message: fmt.Sprintf("processing timeout: no result within %s", processing)})
		}
	}
	results.over = true
	r := *results.got
	if !r.Outcome.Recorded {
		return finishAttemptLocally(ctx, p, workerOutcome(r.Outcome))
	}
	return attemptFinished(ctx, p, r.Outcome, contract.FinishTaskResult{Applied: true, Status: r.Status})
}
