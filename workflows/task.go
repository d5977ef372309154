package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// Registered names of the task workflows.
const (
	TaskName        = "task"
	TaskSweeperName = "task-sweeper"
)

// TaskResultUpdate delivers a worker's result that reached the gateway while the attempt's
// wait was not open: the worker reported before its answer to the push reached courier. The
// gateway sends it only when completing the wait by its id found no wait.
const TaskResultUpdate = "task-result"

// ErrTypeAttemptOver marks a TaskResultUpdate the attempt refuses: it already has its outcome
// (a result, a timeout, a refused push or a cancel), or the update names another attempt.
const ErrTypeAttemptOver = "AttemptOver"

// ErrTypeTaskFailed is the failure type of the run of an attempt that left its task Failed
// (attempts spent, or the pending timeout): the run ends Failed with the attempt's message, after
// the row recorded it (the row stays the source of truth), so the Temporal UI lists it under
// Failures. Its details carry the TaskRunResult.
const ErrTypeTaskFailed = "TaskFailed"

// taskFailsChange guards an attempt that leaves its task Failed ending its run Failed: runs
// recorded before it completed.
const taskFailsChange = "task-failed-fails"

// TaskResultParams is a worker's report of one attempt, as TaskResultUpdate carries it.
type TaskResultParams struct {
	Attempt int
	Outcome courier.AttemptOutcome
	// Status is the task's status as the gateway's finish left it, for an outcome it recorded
	// in the row (Outcome.Recorded; runs of TaskLocalPushV only).
	Status courier.TaskStatus `json:",omitempty"`
}

// TaskParams is one attempt of a task version, as its claimer started it. The payload stays in
// the database.
type TaskParams struct {
	TaskID            string
	Version           int64
	Attempt           int
	Queue             string
	Priority          int
	ProcessingTimeout time.Duration // the push and the wait for the result
	HeartbeatTimeout  time.Duration // 0: off; the wait alone carries it
	PushTimeout       time.Duration // one try of the push; 0: courier.DefaultPushTimeout
	// V is the code version the attempt was started for: TaskV from the claimer, 0 in
	// attempts started before it existed (they ask splitPushChange and taskFailsChange).
	V int `json:",omitempty"`
}

// TaskRunResult is how one attempt's workflow ended.
type TaskRunResult struct {
	Stale   bool               // the task had moved on before the push; nothing was done
	Applied bool               // the row holds the outcome (false if the task had moved on meanwhile)
	Status  courier.TaskStatus // the task's status afterwards
	Outcome courier.AttemptOutcome
}

// finishOptions retry recording an outcome until the database answers: a slot must never stay
// taken because a write failed once.
var finishOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         untilDone.Temporal(),
}

var (
	saTaskState = temporal.NewSearchAttributeKeyKeyword(courier.SAState)
)

// splitPushChange is the workflow.GetVersion change that split an attempt's one push activity,
// which stayed open until the result, into a push that ends when the worker answers and a
// wait for the result. Runs recorded before it replay the single push (taskSinglePush).
const splitPushChange = "split-push"

// Task code versions, carried in TaskParams.V (the input is in the history, so a run knows its
// version without asking workflow.GetVersion, whose first call records a marker and upserts a
// search attribute). Attempts started by older claimers have V = 0 and replay the guarded
// paths.
const (
	// taskInputV runs the split push and wait (SendPushName, AwaitResultName, then FinishTaskName
	// as an activity) and ends Failed when it leaves its task Failed, without asking
	// workflow.GetVersion.
	taskInputV = 1
	// TaskPushAwaitV runs one activity for the push and the wait (PushAwaitName), records the
	// outcome in a local activity and upserts no state for a success: 12 history events for a
	// successful attempt, against 24 for taskInputV.
	TaskPushAwaitV = 2
	// TaskOnPushQueueV runs as TaskPushAwaitV, but the run itself is on the push task queue
	// (TaskRunQueue) and schedules its push-and-wait on its own queue, so the worker that
	// completes the run's first workflow task takes the push at once (eager activity dispatch)
	// instead of the server handing it over through matching.
	TaskOnPushQueueV = 3
	// TaskRecordedV runs as TaskOnPushQueueV, but a success the gateway recorded in the row
	// before it handed it over (AttemptOutcome.Recorded) ends the run at once, without the
	// finish's local activity: 11 history events and 2 billable actions for a successful
	// attempt, against 12 and 3.
	TaskRecordedV = 4
	// TaskLocalPushV pushes in a local activity and waits in the run itself, on a timer for the
	// processing deadline, for the result the gateway recorded in the row (TaskResultUpdate):
	// no activity at all (localPushAttempt). The claimer starts it for attempts without a
	// heartbeat timeout, and TaskRecordedV for the others.
	TaskLocalPushV = 5
	// TaskV is the version the claimer starts new attempts with, unless told to start an older
	// one while a fleet is upgraded (docs/deployment.md).
	TaskV = TaskLocalPushV
)

// TaskRunQueue is the task queue an attempt of code version v runs on, beside the workflows'
// queue workflowQueue: the push queue from TaskOnPushQueueV, workflowQueue before.
func TaskRunQueue(workflowQueue string, v int) string {
	if v >= TaskOnPushQueueV {
		return contract.TaskPushQueue(workflowQueue)
	}
	return workflowQueue
}

// pushRetry tries a push again within its attempt when a try failed on the way (no
// connection, no answer within the push timeout, 429 or 5xx), after the worker's Retry-After
// when it sent one; the push's schedule-to-close timeout keeps every try before the processing
// deadline. A refused push (4xx, blocked address) or a stale attempt is not retried.
var pushRetry = RetryPolicy{InitialInterval: contract.PushRetryInitial, BackoffCoef: 2, MaxInterval: contract.PushRetryMax, MaxAttempts: courier.PushTries}

// pushNonRetryable are the push's error types that no retry can fix.
var pushNonRetryable = []string{contract.ErrTypePushFailed, contract.ErrTypeTaskStale}

// pushTryMargin is what a push try's start-to-close timeout allows beyond the push timeout, so
// the HTTP client's own timeout (which classifies the try) fires first and the database write
// before the request fits.
const pushTryMargin = 10 * time.Second

// defaultProcessingTimeout applies to runs started without one (courier.Queue's default).
const defaultProcessingTimeout = 10 * time.Minute

// Task runs one attempt of a task version (workflow id task/<task_id>/<version>; each attempt
// is a new run under that id). Attempts of TaskLocalPushV run localPushAttempt, those of
// TaskPushAwaitV to TaskRecordedV pushAwaitAttempt; older ones run
// as they were recorded, as follows. It pushes the task to the queue's worker on the push task queue
// (each try bounded by the queue's push timeout, tries that failed on the way repeated within
// the attempt), then waits for the worker's result in a second activity, on the finish task
// queue, that alone carries the processing deadline and the heartbeat timeout: the heartbeat
// timeout starts once the worker has the task. The gateway completes the wait by its id with
// the worker's result; a result that arrives before the wait is open comes as the
// TaskResultUpdate instead. Then one activity records the outcome and releases the slot in one
// transaction: success, a retry later (back to Pending) or failed per the queue's policy (a
// success the gateway recorded before it handed it over is found there, and nothing changes;
// runs of TaskRecordedV skip this finish for it). That
// record runs on a disconnected context, so a cancel that arrives meanwhile cannot leave the
// row in Processing. A cancelled attempt is finished as cancelled, which changes nothing when
// the API already cancelled the row and freed its slot (a cancel from the Temporal UI or CLI
// relies on it).
func Task(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	switch {
	case p.V >= TaskLocalPushV:
		return localPushAttempt(ctx, p)
	case p.V >= TaskPushAwaitV:
		return pushAwaitAttempt(ctx, p)
	case p.V < taskInputV && workflow.GetVersion(ctx, splitPushChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion:
		return taskSinglePush(ctx, p)
	}
	out, stale, err := pushAndWait(ctx, p)
	if err != nil {
		return TaskRunResult{}, err
	}
	if stale {
		return TaskRunResult{Stale: true}, nil
	}
	fopts := finishOptions
	fopts.TaskQueue = contract.TaskFinishQueue(workflow.GetInfo(ctx).TaskQueueName)
	return finishAttempt(ctx, p, out, fopts)
}

// pushAndWait runs one attempt up to its outcome; stale means the task had moved on before the
// push and nothing is to be recorded.
func pushAndWait(ctx workflow.Context, p TaskParams) (out courier.AttemptOutcome, stale bool, err error) {
	queue := workflow.GetInfo(ctx).TaskQueueName
	processing, pushTimeout := p.timeouts()
	deadline := workflow.Now(ctx).Add(processing)

	// The worker's result normally completes the wait. One that arrives while no wait is open
	// comes as an update, accepted until the attempt has its outcome.
	results, err := takeResults(ctx, p.Attempt)
	if err != nil {
		return out, false, err
	}
	early := func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) }

	pctx, cancelPush := workflow.WithCancel(ctx)
	pctx = workflow.WithActivityOptions(pctx, workflow.ActivityOptions{
		TaskQueue:              contract.TaskPushQueue(queue),
		ScheduleToCloseTimeout: processing,
		StartToCloseTimeout:    pushTimeout + pushTryMargin,
		RetryPolicy:            pushRetry.Temporal(pushNonRetryable...),
	})
	push := workflow.ExecuteActivity(pctx, contract.SendPushName, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version,
		Attempt: p.Attempt, ProcessingTimeout: processing, HeartbeatTimeout: p.HeartbeatTimeout, Deadline: deadline, PushTimeout: pushTimeout})
	var pushErr error
	pushed := false
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(push, func(f workflow.Future) { pushed, pushErr = true, f.Get(ctx, nil) })
	sel.AddReceive(results.ch, early)
	sel.Select(ctx)
	if results.got != nil {
		results.over = true
		if !pushed {
			cancelPush() // the worker has the task: its answer to the push no longer matters
		}
		return workerOutcome(results.got.Outcome), false, nil
	}
	if pushErr != nil {
		results.over = true
		out, stale := pushEnded(ctx, pushErr, processing, pushTimeout)
		return out, stale, nil
	}

	remaining := deadline.Sub(workflow.Now(ctx))
	if remaining <= 0 {
		results.over = true
		return courier.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: fmt.Sprintf("processing timeout: no result within %s", processing)}, false, nil
	}
	wctx, cancelWait := workflow.WithCancel(ctx)
	wctx = workflow.WithActivityOptions(wctx, workflow.ActivityOptions{
		TaskQueue:              contract.TaskFinishQueue(queue),
		ActivityID:             courier.TaskAttemptActivityID(p.Attempt),
		ScheduleToCloseTimeout: remaining,
		StartToCloseTimeout:    remaining,
		HeartbeatTimeout:       p.HeartbeatTimeout,
		RetryPolicy:            once.Temporal(), // a failed or timed-out attempt goes back through the queue's retry policy
	})
	wait := workflow.ExecuteActivity(wctx, contract.AwaitResultName,
		contract.AwaitResultParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt})
	var waitErr error
	waited := false
	sel = workflow.NewSelector(ctx)
	sel.AddFuture(wait, func(f workflow.Future) { waited, waitErr = true, f.Get(ctx, &out) })
	sel.AddReceive(results.ch, early)
	sel.Select(ctx)
	results.over = true
	if results.got != nil {
		if !waited {
			cancelWait()
		}
		return workerOutcome(results.got.Outcome), false, nil
	}
	var to *temporal.TimeoutError
	switch {
	case waitErr == nil:
		return workerOutcome(out), false, nil
	case temporal.IsCanceledError(waitErr) || ctx.Err() != nil:
		return courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}, false, nil
	case errors.As(waitErr, &to):
		return courier.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: timeoutMessage(to, p)}, false, nil
	default:
		return courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(waitErr)}, false, nil
	}
}

// attemptResults takes the worker's results of one attempt that reach its run as
// TaskResultUpdate: the first one for the attempt while the attempt has no outcome (got, and a
// value on ch); one for another attempt, a second one, or one after over is refused with
// ErrTypeAttemptOver.
type attemptResults struct {
	attempt int
	got     *TaskResultParams
	over    bool // the attempt has its outcome otherwise
	ch      workflow.Channel
}

// takeResults registers the run's TaskResultUpdate handler for attempt.
func takeResults(ctx workflow.Context, attempt int) (*attemptResults, error) {
	a := &attemptResults{attempt: attempt, ch: workflow.NewBufferedChannel(ctx, 1)}
	refuse := func(r TaskResultParams) error {
		if r.Attempt != a.attempt || a.over || a.got != nil {
			return temporal.NewApplicationError(fmt.Sprintf("attempt %d is no longer running", r.Attempt), ErrTypeAttemptOver)
		}
		return nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, TaskResultUpdate,
		func(ctx workflow.Context, r TaskResultParams) error {
			if err := refuse(r); err != nil {
				return err
			}
			a.got = &r
			a.ch.SendAsync(true)
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r TaskResultParams) error { return refuse(r) }},
	)
	return a, err
}

// pushEnded reads a push that failed (err from the push's future): stale when the task had
// moved on before it, otherwise the attempt's outcome.
func pushEnded(ctx workflow.Context, err error, processing, pushTimeout time.Duration) (out courier.AttemptOutcome, stale bool) {
	var app *temporal.ApplicationError
	var to *temporal.TimeoutError
	switch {
	case errors.As(err, &app) && app.Type() == contract.ErrTypeTaskStale:
		return out, true
	case temporal.IsCanceledError(err) || ctx.Err() != nil:
		return courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}, false
	case errors.As(err, &to) && to.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
		return courier.AttemptOutcome{Kind: courier.OutcomeTimeout,
			Message: fmt.Sprintf("processing timeout: the push was not accepted within %s", processing)}, false
	case errors.As(err, &to):
		return courier.AttemptOutcome{Kind: courier.OutcomeFailure,
			Message: fmt.Sprintf("push: no answer within the push timeout (%s)", pushTimeout)}, false
	default:
		return courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(err)}, false
	}
}

// timeouts are the attempt's processing and push timeouts, defaulted for runs started without
// them.
func (p TaskParams) timeouts() (processing, push time.Duration) {
	processing, push = p.ProcessingTimeout, p.PushTimeout
	if processing <= 0 {
		processing = defaultProcessingTimeout
	}
	if push <= 0 {
		push = courier.DefaultPushTimeout
	}
	return processing, push
}

// pushAwaitAttempt runs an attempt of TaskPushAwaitV and later: one activity on the push task queue,
// addressed by the attempt's activity id, pushes to the worker (its tries within the attempt)
// and stays open until the gateway completes it with the worker's result; it alone carries the
// processing deadline and the heartbeat timeout, which it keeps from firing while it pushes.
// Then a local activity records the outcome and releases the slot (or finds the success the
// gateway recorded). From TaskRecordedV, a success the gateway says it recorded ends the run
// without that finish.
func pushAwaitAttempt(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	processing, pushTimeout := p.timeouts()
	pushQueue := contract.TaskPushQueue(workflow.GetInfo(ctx).TaskQueueName)
	if p.V >= TaskOnPushQueueV {
		pushQueue = "" // the run's own queue, which is the push queue: eligible for eager dispatch
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              pushQueue,
		ActivityID:             courier.TaskAttemptActivityID(p.Attempt),
		ScheduleToCloseTimeout: processing,
		StartToCloseTimeout:    processing,
		HeartbeatTimeout:       p.HeartbeatTimeout,
		RetryPolicy:            once.Temporal(), // a failed or timed-out attempt goes back through the queue's retry policy
	})
	var out courier.AttemptOutcome
	err := workflow.ExecuteActivity(actx, contract.PushAwaitName, contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version,
		Attempt: p.Attempt, ProcessingTimeout: processing, HeartbeatTimeout: p.HeartbeatTimeout,
		Deadline: workflow.Now(ctx).Add(processing), PushTimeout: pushTimeout}).Get(ctx, &out)
	out, stale := attemptEnded(ctx, out, err, func(to *temporal.TimeoutError) string { return pushAwaitTimeoutMessage(to, p, processing) })
	switch {
	case stale:
		return TaskRunResult{Stale: true}, nil
	case p.V >= TaskRecordedV && out.Kind == courier.OutcomeSuccess && out.Recorded:
		// The row holds it and the slot is free already; a success upserts no state.
		return TaskRunResult{Applied: true, Status: courier.TaskSuccess, Outcome: out}, nil
	}
	return finishAttemptLocally(ctx, p, out)
}

// pushAwaitTimeoutMessage says why a push-and-wait timed out: its last heartbeat tells whether
// the push was still being tried.
func pushAwaitTimeoutMessage(to *temporal.TimeoutError, p TaskParams, processing time.Duration) string {
	var detail contract.PushingDetail
	pushing := to.HasLastHeartbeatDetails() && to.LastHeartbeatDetails(&detail) == nil && detail.CourierPushing
	switch {
	case pushing && to.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return "heartbeat timeout: courier stopped pushing before the worker answered (its worker process ended?)"
	case pushing:
		return fmt.Sprintf("processing timeout: the push was not accepted within %s", processing)
	}
	return timeoutMessage(to, p)
}

// attemptEnded reads how an attempt's activity that carries the worker's result ended (err
// from its future, out its result): the worker's outcome, a cancel, a timeout (worded by
// timedOut), a failure; stale when the task had moved on before the push.
func attemptEnded(ctx workflow.Context, out courier.AttemptOutcome, err error, timedOut func(*temporal.TimeoutError) string) (courier.AttemptOutcome, bool) {
	var app *temporal.ApplicationError
	var to *temporal.TimeoutError
	switch {
	case err == nil:
		return workerOutcome(out), false
	case errors.As(err, &app) && app.Type() == contract.ErrTypeTaskStale:
		return courier.AttemptOutcome{}, true
	case temporal.IsCanceledError(err) || ctx.Err() != nil:
		return courier.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}, false
	case errors.As(err, &to):
		return courier.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: timedOut(to)}, false
	default:
		return courier.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(err)}, false
	}
}

// workerOutcome keeps a worker's report, read as a failure unless it says success.
func workerOutcome(o courier.AttemptOutcome) courier.AttemptOutcome {
	if o.Kind != courier.OutcomeSuccess {
		o.Kind = courier.OutcomeFailure
	}
	return o
}

// taskSinglePush is the attempt as runs recorded before splitPushChange ran it: one push
// activity, addressed by the attempt's activity id, that stays open until the gateway
// completes it with the result and carries the processing and heartbeat timeouts itself.
// It must keep scheduling exactly what it did then.
func taskSinglePush(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	pctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          courier.TaskAttemptActivityID(p.Attempt),
		StartToCloseTimeout: p.ProcessingTimeout,
		HeartbeatTimeout:    p.HeartbeatTimeout,
		RetryPolicy:         once.Temporal(), // retries go back through the queue
	})
	var out courier.AttemptOutcome
	err := workflow.ExecuteActivity(pctx, contract.PushTaskName,
		contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt,
			ProcessingTimeout: p.ProcessingTimeout, HeartbeatTimeout: p.HeartbeatTimeout}).Get(ctx, &out)
	out, stale := attemptEnded(ctx, out, err, func(to *temporal.TimeoutError) string { return timeoutMessage(to, p) })
	if stale {
		return TaskRunResult{Stale: true}, nil
	}
	return finishAttempt(ctx, p, out, finishOptions)
}

// finishAttempt records the attempt's outcome in an activity on a disconnected context (runs
// before TaskPushAwaitV).
func finishAttempt(ctx workflow.Context, p TaskParams, out courier.AttemptOutcome, opts workflow.ActivityOptions) (TaskRunResult, error) {
	var fin contract.FinishTaskResult
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	fctx := workflow.WithActivityOptions(ctx, opts)
	if err := workflow.ExecuteActivity(fctx, contract.FinishTaskName, contract.FinishTaskParams{
		TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt, Outcome: out}).Get(fctx, &fin); err != nil {
		return TaskRunResult{}, err
	}
	return attemptFinished(ctx, p, out, fin)
}

// finishLocalOptions retry recording an outcome in a local activity until the database
// answers, as finishOptions do: one try is a single transaction. The schedule-to-close
// timeout is set because the SDK otherwise takes the start-to-close one for it, which would
// end the retries after 30 s; retries past the local-retry threshold wait on workflow timers.
var finishLocalOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: 10 * 365 * 24 * time.Hour,
	StartToCloseTimeout:    30 * time.Second,
	RetryPolicy:            untilDone.Temporal(),
}

// finishAttemptLocally records the attempt's outcome in a local activity on a disconnected
// context: one marker in the history instead of an activity's three events and a workflow
// task's three.
func finishAttemptLocally(ctx workflow.Context, p TaskParams, out courier.AttemptOutcome) (TaskRunResult, error) {
	var fin contract.FinishTaskResult
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(ctx, finishLocalOptions)
	if err := workflow.ExecuteLocalActivity(lctx, contract.FinishTaskName, contract.FinishTaskParams{
		TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt, Outcome: out}).Get(lctx, &fin); err != nil {
		return TaskRunResult{}, err
	}
	return attemptFinished(ctx, p, out, fin)
}

// attemptFinished ends the run once the row has the outcome: when the row took it, it writes
// the task's new status to the run's search attribute, and a task left Failed fails the run.
// From TaskPushAwaitV a success writes nothing: the run completes, which says it (a state
// upsert is an event, a billable action and a visibility write, spent only on the states
// operators look for: retries, failures, cancels).
func attemptFinished(ctx workflow.Context, p TaskParams, out courier.AttemptOutcome, fin contract.FinishTaskResult) (TaskRunResult, error) {
	if fin.Applied && (p.V < TaskPushAwaitV || fin.Status != courier.TaskSuccess) {
		_ = workflow.UpsertTypedSearchAttributes(ctx, saTaskState.ValueSet(string(fin.Status)))
	}
	res := TaskRunResult{Applied: fin.Applied, Status: fin.Status, Outcome: out}
	if !fin.Applied || fin.Status != courier.TaskFailed ||
		(p.V < taskInputV && workflow.GetVersion(ctx, taskFailsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion) {
		return res, nil
	}
	msg := out.Message
	if msg == "" {
		msg = fmt.Sprintf("task failed: attempt %d ended in %s", p.Attempt, out.Kind)
	}
	return res, temporal.NewNonRetryableApplicationError(msg, ErrTypeTaskFailed, nil, res)
}

func timeoutMessage(to *temporal.TimeoutError, p TaskParams) string {
	switch to.TimeoutType() {
	case enumspb.TIMEOUT_TYPE_HEARTBEAT:
		return fmt.Sprintf("heartbeat timeout: no heartbeat for %s", p.HeartbeatTimeout)
	default:
		return fmt.Sprintf("processing timeout: no result within %s", p.ProcessingTimeout)
	}
}

// sweepRetry tries a failed sweep twice more, 5 s apart at first; the next scheduled sweep
// picks up whatever is left after that.
var sweepRetry = RetryPolicy{InitialInterval: 5 * time.Second, MaxAttempts: 3}

// TaskSweeper runs one sweep of the task lifecycle. A Temporal Schedule starts it, with
// overlaps skipped, so exactly one runs at a time across the fleet.
func TaskSweeper(ctx workflow.Context, p contract.SweepParams) (contract.SweepResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           contract.TaskFinishQueue(workflow.GetInfo(ctx).TaskQueueName),
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         sweepRetry.Temporal(),
	})
	var res contract.SweepResult
	err := workflow.ExecuteActivity(actx, contract.SweepTasksName, p).Get(ctx, &res)
	return res, err
}
