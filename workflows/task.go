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

// TaskResultUpdate hands an attempt without a heartbeat timeout its worker's result
// (contract.AttemptResult): the gateway sends it once it has recorded the result in the row and
// answered the worker, marked recorded, or unrecorded when the row could not be written.
const TaskResultUpdate = "task-result"

// ErrTypeAttemptOver marks a TaskResultUpdate the attempt refuses: it already has its outcome
// (a result, a timeout, a refused push or a cancel), or the update names another attempt.
const ErrTypeAttemptOver = "AttemptOver"

// ErrTypeTaskFailed is the failure type of the run of an attempt that left its task Failed
// (attempts spent, or the pending timeout): the run ends Failed with the attempt's message, after
// the row recorded it (the row stays the source of truth), so the Temporal UI lists it under
// Failures. Its details carry the TaskRunResult.
const ErrTypeTaskFailed = "TaskFailed"

// TaskParams is one attempt of a task version, as its claimer started it. The payload stays in
// the database.
type TaskParams struct {
	TaskID            string
	Version           int64 // the task version
	Attempt           int
	Queue             string
	Priority          int
	ProcessingTimeout time.Duration // the push and the wait for the result; 0: defaultProcessingTimeout
	// HeartbeatTimeout is how long the worker may go without a heartbeat once it has the task;
	// 0: off. It decides how the run waits for the result (Task).
	HeartbeatTimeout time.Duration
	PushTimeout      time.Duration // one try of the push; 0: courier.DefaultPushTimeout
	// FinalState makes the run write the task's status to CourierState however the attempt
	// ends, success included, so the search attribute never goes on saying "processing" after
	// the run closed. Runs started before it existed (recorded histories) wrote none for a
	// success; the field keeps them replaying as they ran.
	FinalState bool `json:",omitempty"`
	// QuietSuccess makes the run write CourierState only when the attempt ends other than in
	// the task's success: the status it left (pending for a retry, failed, cancelled), or stale
	// when the task had moved on and the run changed nothing. A run that closes Completed
	// without a state succeeded, so a success costs no upsert (one event and one billable
	// action less), and the claimer sets no state at the start (ExecutionStatus Running says
	// it). It overrides FinalState, which the claimer still sets so that a worker from before
	// QuietSuccess, running a run started by a newer claimer during a rolling upgrade, writes
	// "success". Runs started before it (recorded histories) replay as they ran.
	QuietSuccess bool `json:",omitempty"`
}

// TaskRunResult is how one attempt's workflow ended.
type TaskRunResult struct {
	Stale   bool               // the task had moved on before the push; nothing was done
	Applied bool               // the row holds the outcome (false if the task had moved on meanwhile)
	Status  courier.TaskStatus // the task's status afterwards
	Outcome contract.AttemptOutcome
}

// StateStale is the CourierState of a task attempt's run that found its task moved on before
// its push (cancelled, superseded or finished meanwhile) and did nothing, or (QuietSuccess) whose
// outcome (other than its own cancel) the row did not take because the task had moved on
// meanwhile.
const StateStale = "stale"

// pushRetry tries a push again within its attempt when a try failed on the way (no
// connection, no answer within the push timeout, 429 or 5xx), after the worker's Retry-After
// when it sent one; the push's schedule-to-close timeout keeps every try before the processing
// deadline. A refused push (4xx, blocked address) or a stale attempt is not retried.
var pushRetry = courier.RetryPolicy{InitialInterval: contract.PushRetryInitial, BackoffCoef: 2, MaxInterval: contract.PushRetryMax, MaxAttempts: courier.PushTries}

// pushNonRetryable are the push's error types that no retry can fix.
var pushNonRetryable = []string{contract.ErrTypePushFailed, contract.ErrTypeTaskStale}

// pushTryMargin is what a push try's start-to-close timeout allows beyond the push timeout, so
// the HTTP client's own timeout (which classifies the try) fires first and the database write
// before the request fits.
const pushTryMargin = 10 * time.Second

// defaultProcessingTimeout applies to runs started without one (courier.Queue's default).
const defaultProcessingTimeout = 10 * time.Minute

// finishOptions retry recording an outcome in a local activity until the database answers: a
// slot must never stay taken because a write failed once, and one try is a single transaction.
// The schedule-to-close timeout is set because the SDK otherwise takes the start-to-close one
// for it, which would end the retries after 30 s; retries past the local-retry threshold wait on
// workflow timers.
var finishOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: 10 * 365 * 24 * time.Hour,
	StartToCloseTimeout:    30 * time.Second,
	RetryPolicy:            TemporalRetry(untilDone),
}

// Task runs one attempt of a task version (workflow id task/<task_id>/<version>; each attempt
// is a new run under that id, on the push task queue, courier.TaskPushQueue). It pushes the
// task to the queue's worker (each try bounded by the queue's push timeout, tries that failed
// on the way repeated within the attempt) and waits for the worker's result until the
// processing deadline. The gateway records the result in the row (the queue's retry policy
// applied), answers the worker, and then hands the result to the run marked recorded: the run
// ends as the row says, without a write of its own. How the run waits depends on the attempt's
// heartbeat timeout:
//
//   - without one, the push is a local activity in the run's first workflow task, and the run
//     waits on a timer for the deadline and takes the result as TaskResultUpdate: no activity
//     at all (pushThenWait);
//   - with one, the worker's heartbeats must extend something: one activity pushes and then
//     stays open, addressed by the attempt's activity id, until the gateway completes it with
//     the result; it carries the heartbeat timeout, which starts once the worker has the task
//     (pushAndAwait).
//
// An outcome the gateway did not record (its write failed), a timeout, a refused push and a
// cancel are recorded by the run, in a local activity that releases the slot in the same
// transaction, on a disconnected context, so a cancel that arrives meanwhile cannot leave the
// row in Processing. A cancelled attempt is finished as cancelled, which changes nothing when
// the API already cancelled the row and freed its slot (a cancel from the Temporal UI or CLI
// relies on it). A push that finds the task moved on ends the run as stale, touching nothing.
func Task(ctx workflow.Context, p TaskParams) (TaskRunResult, error) {
	var (
		r     contract.AttemptResult
		stale bool
		err   error
	)
	if p.HeartbeatTimeout > 0 {
		r, stale = pushAndAwait(ctx, p)
	} else if r, stale, err = pushThenWait(ctx, p); err != nil {
		return TaskRunResult{}, err
	}
	switch {
	case stale:
		if p.FinalState || p.QuietSuccess {
			// The task had moved on (cancelled, superseded, finished by an earlier run): this
			// run did nothing, and says so.
			_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(StateStale))
		}
		return TaskRunResult{Stale: true}, nil
	case r.Outcome.Recorded:
		// The row holds it and the slot is free already.
		return attemptFinished(ctx, p, r.Outcome, contract.FinishTaskResult{Applied: true, Status: r.Status})
	}
	return finishAttempt(ctx, p, r.Outcome)
}

// pushParams is the push of attempt p, with its timeouts defaulted and its deadline fixed now.
func pushParams(ctx workflow.Context, p TaskParams) contract.PushTaskParams {
	processing, push := p.ProcessingTimeout, p.PushTimeout
	if processing <= 0 {
		processing = defaultProcessingTimeout
	}
	if push <= 0 {
		push = courier.DefaultPushTimeout
	}
	return contract.PushTaskParams{TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt, ProcessingTimeout: processing,
		HeartbeatTimeout: p.HeartbeatTimeout, Deadline: workflow.Now(ctx).Add(processing), PushTimeout: push}
}

// pushThenWait runs an attempt without a heartbeat timeout up to its outcome. The push is a
// local activity (its tries within the attempt); then the run waits, on a timer for the
// processing deadline, for the worker's result as TaskResultUpdate. The gateway sends it after
// it has answered the worker, so a worker that reports before it answers the push never waits
// on this run's workflow task, which stays open while the push runs. A result that reached the
// run while it pushed is the attempt's, whatever the push's own answer: the worker had the task.
// stale means the task had moved on before the push.
func pushThenWait(ctx workflow.Context, p TaskParams) (r contract.AttemptResult, stale bool, err error) {
	push := pushParams(ctx, p)
	results, err := takeResults(ctx, p.Attempt)
	if err != nil {
		return r, false, err
	}
	defer func() { results.over = true }() // the attempt has its outcome: later updates are refused

	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: push.ProcessingTimeout,
		StartToCloseTimeout:    push.PushTimeout + pushTryMargin,
		RetryPolicy:            TemporalRetry(pushRetry, pushNonRetryable...),
	})
	pushErr := workflow.ExecuteLocalActivity(lctx, contract.SendPushName, push).Get(ctx, nil)
	if results.got == nil && pushErr != nil {
		out, stale := pushEnded(ctx, pushErr, push)
		return contract.AttemptResult{Attempt: p.Attempt, Outcome: out}, stale, nil
	}
	timedOut := false
	if remaining := push.Deadline.Sub(workflow.Now(ctx)); results.got == nil && remaining > 0 {
		timer := workflow.NewTimer(ctx, remaining)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(results.ch, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.AddFuture(timer, func(f workflow.Future) { timedOut = f.Get(ctx, nil) == nil })
		for results.got == nil && !timedOut && ctx.Err() == nil {
			sel.Select(ctx)
		}
	}
	switch {
	case results.got != nil:
		r = *results.got
		r.Outcome = workerOutcome(r.Outcome)
		return r, false, nil
	case ctx.Err() != nil:
		return contract.AttemptResult{Attempt: p.Attempt, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}}, false, nil
	}
	return contract.AttemptResult{Attempt: p.Attempt, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeTimeout,
		Message: fmt.Sprintf("processing timeout: no result within %s", push.ProcessingTimeout)}}, false, nil
}

// attemptResults takes the worker's results of one attempt that reach its run as
// TaskResultUpdate: the first one for the attempt while the attempt has no outcome (got, and a
// value on ch); one for another attempt, a second one, or one after over is refused with
// ErrTypeAttemptOver.
type attemptResults struct {
	attempt int
	got     *contract.AttemptResult
	over    bool // the attempt has its outcome otherwise
	ch      workflow.Channel
}

// takeResults registers the run's TaskResultUpdate handler for attempt.
func takeResults(ctx workflow.Context, attempt int) (*attemptResults, error) {
	a := &attemptResults{attempt: attempt, ch: workflow.NewBufferedChannel(ctx, 1)}
	refuse := func(r contract.AttemptResult) error {
		if r.Attempt != a.attempt || a.over || a.got != nil {
			return temporal.NewApplicationError(fmt.Sprintf("attempt %d is no longer running", r.Attempt), ErrTypeAttemptOver)
		}
		return nil
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, TaskResultUpdate,
		func(ctx workflow.Context, r contract.AttemptResult) error {
			if err := refuse(r); err != nil {
				return err
			}
			a.got = &r
			a.ch.SendAsync(true)
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r contract.AttemptResult) error { return refuse(r) }},
	)
	return a, err
}

// pushEnded reads a local push that failed (err from its future): stale when the task had
// moved on before it, otherwise the attempt's outcome.
func pushEnded(ctx workflow.Context, err error, push contract.PushTaskParams) (out contract.AttemptOutcome, stale bool) {
	var app *temporal.ApplicationError
	var to *temporal.TimeoutError
	switch {
	case errors.As(err, &app) && app.Type() == contract.ErrTypeTaskStale:
		return out, true
	case temporal.IsCanceledError(err) || ctx.Err() != nil:
		return contract.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}, false
	case errors.As(err, &to) && to.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
		return contract.AttemptOutcome{Kind: courier.OutcomeTimeout,
			Message: fmt.Sprintf("processing timeout: the push was not accepted within %s", push.ProcessingTimeout)}, false
	case errors.As(err, &to):
		return contract.AttemptOutcome{Kind: courier.OutcomeFailure,
			Message: fmt.Sprintf("push: no answer within the push timeout (%s)", push.PushTimeout)}, false
	default:
		return contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(err)}, false
	}
}

// pushAndAwait runs an attempt with a heartbeat timeout up to its outcome: one activity on the
// run's own queue (the push queue, so the worker that completes the run's first workflow task
// takes it at once), addressed by the attempt's activity id, pushes to the worker (its tries
// within the attempt) and stays open until the gateway completes it with the worker's result;
// it alone carries the processing deadline and the heartbeat timeout, which it keeps from
// firing while it pushes. stale means the task had moved on before the push.
func pushAndAwait(ctx workflow.Context, p TaskParams) (r contract.AttemptResult, stale bool) {
	push := pushParams(ctx, p)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:             courier.TaskAttemptActivityID(p.Attempt),
		ScheduleToCloseTimeout: push.ProcessingTimeout,
		StartToCloseTimeout:    push.ProcessingTimeout,
		HeartbeatTimeout:       p.HeartbeatTimeout,
		RetryPolicy:            TemporalRetry(once), // a failed or timed-out attempt goes back through the queue's retry policy
	})
	err := workflow.ExecuteActivity(actx, contract.PushAwaitName, push).Get(ctx, &r)
	var app *temporal.ApplicationError
	var to *temporal.TimeoutError
	switch {
	case err == nil:
		r.Outcome = workerOutcome(r.Outcome)
		return r, false
	case errors.As(err, &app) && app.Type() == contract.ErrTypeTaskStale:
		return r, true
	case temporal.IsCanceledError(err) || ctx.Err() != nil:
		return contract.AttemptResult{Attempt: p.Attempt, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeCancelled, Message: "cancelled"}}, false
	case errors.As(err, &to):
		return contract.AttemptResult{Attempt: p.Attempt, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: timeoutMessage(to, push)}}, false
	default:
		return contract.AttemptResult{Attempt: p.Attempt, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeFailure, Message: rootMessage(err)}}, false
	}
}

// timeoutMessage says why an attempt's push-and-wait timed out: its last heartbeat tells
// whether the push was still being tried.
func timeoutMessage(to *temporal.TimeoutError, push contract.PushTaskParams) string {
	var detail contract.PushingDetail
	pushing := to.HasLastHeartbeatDetails() && to.LastHeartbeatDetails(&detail) == nil && detail.CourierPushing
	heartbeat := to.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
	switch {
	case pushing && heartbeat:
		return "heartbeat timeout: courier stopped pushing before the worker answered (its worker process ended?)"
	case pushing:
		return fmt.Sprintf("processing timeout: the push was not accepted within %s", push.ProcessingTimeout)
	case heartbeat:
		return fmt.Sprintf("heartbeat timeout: no heartbeat for %s", push.HeartbeatTimeout)
	}
	return fmt.Sprintf("processing timeout: no result within %s", push.ProcessingTimeout)
}

// workerOutcome keeps a worker's report, read as a failure unless it says success.
func workerOutcome(o contract.AttemptOutcome) contract.AttemptOutcome {
	if o.Kind != courier.OutcomeSuccess {
		o.Kind = courier.OutcomeFailure
	}
	return o
}

// finishAttempt records the attempt's outcome in a local activity on a disconnected context:
// one marker in the history instead of an activity's three events and a workflow task's three.
func finishAttempt(ctx workflow.Context, p TaskParams, out contract.AttemptOutcome) (TaskRunResult, error) {
	var fin contract.FinishTaskResult
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	lctx := workflow.WithLocalActivityOptions(ctx, finishOptions)
	if err := workflow.ExecuteLocalActivity(lctx, contract.FinishTaskName, contract.FinishTaskParams{
		TaskID: p.TaskID, Version: p.Version, Attempt: p.Attempt, Outcome: out}).Get(lctx, &fin); err != nil {
		return TaskRunResult{}, err
	}
	return attemptFinished(ctx, p, out, fin)
}

// attemptFinished ends the run once the row has the outcome, and a task left Failed fails the
// run. CourierState: with QuietSuccess, a success writes none, another status the row took is
// written, and an outcome the row did not take because the task had moved on writes cancelled
// for a cancelled run (the API cancelled the task first) and stale otherwise; before
// QuietSuccess, the status the row took was written, a success only with FinalState.
func attemptFinished(ctx workflow.Context, p TaskParams, out contract.AttemptOutcome, fin contract.FinishTaskResult) (TaskRunResult, error) {
	switch {
	case p.QuietSuccess && !fin.Applied && out.Kind == courier.OutcomeCancelled:
		_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(courier.TaskCancelled)))
	case p.QuietSuccess && !fin.Applied:
		_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(StateStale))
	case p.QuietSuccess && fin.Status != courier.TaskSuccess,
		!p.QuietSuccess && fin.Applied && (fin.Status != courier.TaskSuccess || p.FinalState):
		_ = workflow.UpsertTypedSearchAttributes(ctx, saState.ValueSet(string(fin.Status)))
	}
	res := TaskRunResult{Applied: fin.Applied, Status: fin.Status, Outcome: out}
	if !fin.Applied || fin.Status != courier.TaskFailed {
		return res, nil
	}
	msg := out.Message
	if msg == "" {
		msg = fmt.Sprintf("task failed: attempt %d ended in %s", p.Attempt, out.Kind)
	}
	// Once per task (the logger is quiet on replay): the attempts before were expected outcomes.
	workflow.GetLogger(ctx).Error("task failed for good: its attempts are spent; insert it again to retry",
		"task_id", p.TaskID, "version", p.Version, "attempt", p.Attempt, "error", msg)
	return res, temporal.NewNonRetryableApplicationError(msg, ErrTypeTaskFailed, nil, res)
}

// sweepRetry tries a failed sweep twice more, 5 s apart at first; the next scheduled sweep
// picks up whatever is left after that.
var sweepRetry = courier.RetryPolicy{InitialInterval: 5 * time.Second, MaxAttempts: 3}

// sweepsPerRun is how many sweeps one run of the sweeper makes before it continues as new:
// an hour's worth at the default interval, a few hundred history events.
const sweepsPerRun = 60

// TaskSweeper sweeps the task lifecycle every p.Every, in one workflow that continues as new
// every sweepsPerRun sweeps, so the namespace holds one running sweeper and a closed run an
// hour rather than a run a minute (its fixed id keeps exactly one running across the fleet). A
// sweep that fails after its retries is left to the next. With p.Every zero (runs a schedule
// started before) it sweeps once.
func TaskSweeper(ctx workflow.Context, p contract.SweepParams) (contract.SweepResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           courier.TaskFinishQueue(workflow.GetInfo(ctx).TaskQueueName),
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         TemporalRetry(sweepRetry),
	})
	var res contract.SweepResult
	if p.Every <= 0 {
		err := workflow.ExecuteActivity(actx, contract.SweepTasksName, p).Get(ctx, &res)
		return res, err
	}
	for i := 1; ; i++ {
		if err := workflow.ExecuteActivity(actx, contract.SweepTasksName, p).Get(ctx, &res); err != nil {
			if temporal.IsCanceledError(err) {
				return res, err
			}
			workflow.GetLogger(ctx).Warn("a task sweep failed; the next one takes over", "error", err)
		}
		if i >= sweepsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return res, workflow.NewContinueAsNewError(ctx, courier.KindTaskSweeper.Workflow, p)
		}
		if err := workflow.Sleep(ctx, p.Every); err != nil {
			return res, err
		}
	}
}
