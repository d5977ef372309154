package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
)

// Registered names of the task workflows.
const (
	TaskName        = "task"
	TaskSweeperName = "task-sweeper"
)

// Attempt outcome kinds (one definition: courier.Attempt*).
const (
	OutcomeSuccess   = courier.AttemptSuccess
	OutcomeFailure   = courier.AttemptFailure
	OutcomeTimeout   = courier.AttemptTimeout
	OutcomeCancelled = courier.AttemptCancelled
)

// TaskParams is one attempt of a task version, as its claimer started it. The payload stays in
// the database.
type TaskParams struct {
	TaskID            string
	Version           int64
	Attempt           int
	Queue             string
	Priority          int
	ProcessingTimeout time.Duration // the push and the wait for the result
	HeartbeatTimeout  time.Duration // 0: off
}

// TaskRunResult is how one attempt's workflow ended.
type TaskRunResult struct {
	Stale   bool               // the task had moved on before the push; nothing was done
	Applied bool               // the outcome changed the row (false if it had moved on meanwhile)
	Status  courier.TaskStatus // the task's status afterwards
	Outcome activities.TaskOutcome
}

// finishOptions retry recording an outcome until the database answers: a slot must never stay
// taken because a write failed once.
var finishOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
	},
}

var (
	saTaskState = temporal.NewSearchAttributeKeyKeyword(courier.SAState)
)

// Task runs one attempt of a task version (workflow id task/<task_id>/<version>; each attempt
// is a new run under that id). It pushes the task to the queue's worker and waits for the
// worker's result, which the gateway delivers by completing the push activity by its id;
// Temporal enforces the processing timeout (the activity's start-to-close) and the heartbeat
// timeout. Then one activity records the outcome and releases the slot in one transaction:
// success, a retry later (back to Pending) or failed per the queue's policy. That record runs
// on a disconnected context, so a cancel that arrives meanwhile cannot leave the row in
// Processing. A cancelled attempt is finished as cancelled, which changes nothing when the API
// already cancelled the row and freed its slot (a cancel from the Temporal UI or CLI relies on
// it).
func Task(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          courier.TaskAttemptActivityID(p.Attempt),
		StartToCloseTimeout: p.ProcessingTimeout,
		HeartbeatTimeout:    p.HeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1}, // retries go back through the queue
	})
	var out activities.TaskOutcome
	err := workflow.ExecuteActivity(pctx, activities.PushTaskName,
		activities.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
			ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout}).Get(ctx, &out)
	var app *temporal.ApplicationError
	var to *temporal.TimeoutError
	switch {
	case err == nil:
		if out.Kind != OutcomeSuccess {
			out.Kind = OutcomeFailure
		}
	case errors.As(err, &app) && app.Type() == activities.ErrTypeTaskStale:
		return TaskRunResult{Stale: true}, nil
	case temporal.IsCanceledError(err) || ctx.Err() != nil:
		out = activities.TaskOutcome{Kind: OutcomeCancelled, Message: "cancelled"}
	case errors.As(err, &to):
		out = activities.TaskOutcome{Kind: OutcomeTimeout, Message: timeoutMessage(to, p)}
	default:
		out = activities.TaskOutcome{Kind: OutcomeFailure, Message: rootMessage(err)}
	}
	var fin activities.FinishTaskResult
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	fctx := workflow.WithActivityOptions(ctx, finishOptions)
	if err := workflow.ExecuteActivity(fctx, activities.FinishTaskName, activities.FinishTaskParams{
		TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt, Outcome: out}).Get(fctx, &fin); err != nil {
		return TaskRunResult{}, err
	}
	if fin.Applied {
		_ = workflow.UpsertTypedSearchAttributes(ctx, saTaskState.ValueSet(string(fin.Status)))
	}
	return TaskRunResult{Applied: fin.Applied, Status: fin.Status, Outcome: out}, nil
}

func timeoutMessage(to *temporal.TimeoutError, p TaskParams) string {
	switch to.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return fmt.Sprintf("heartbeat timeout: no heartbeat for %s", p.HeartbeatTimeout)
	default:
		return fmt.Sprintf("processing timeout: no result within %s", p.ProcessingTimeout)
	}
}

// TaskSweeper runs one sweep of the task lifecycle. A Temporal Schedule starts it, with
// overlaps skipped, so exactly one runs at a time across the fleet.
func TaskSweeper(ctx workflow.Context, p activities.SweepParams) (activities.SweepResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 5 * time.Second, MaximumAttempts: 3},
	})
	var res activities.SweepResult
	err := workflow.ExecuteActivity(actx, activities.SweepTasksName, p).Get(ctx, &res)
	return res, err
}
