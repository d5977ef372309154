package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
)

// Registered names of the task activities.
const (
	PushTaskName   = "task-push"
	FinishTaskName = "task-finish"
	SweepTasksName = "task-sweep"
)

// ErrTypeTaskStale marks an attempt whose task has moved on (cancelled, or already finished by
// an earlier run): the workflow ends without touching the row.
const ErrTypeTaskStale = "TaskStale"

// ErrTypePushFailed marks a push the worker did not accept.
const ErrTypePushFailed = "PushFailed"

// TaskStore is what the task activities need from the database.
type TaskStore interface {
	MarkTaskPushed(ctx context.Context, taskID string, version int64, attempt int, processingTimeout time.Duration) (store.PushTarget, bool, error)
	FinishTaskAttempt(ctx context.Context, taskID string, version int64, attempt int, o store.AttemptOutcome) (store.FinishResult, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
	ExpirePendingTasks(ctx context.Context, limit int) (int64, error)
	StopSucceededTasks(ctx context.Context, queue string, retention time.Duration, limit int) (int64, error)
	PurgeTasks(ctx context.Context, queue string, age time.Duration, limit int) (int64, error)
	ReconcileLimiters(ctx context.Context) ([]store.LimiterRepair, error)
	OverdueTasks(ctx context.Context, grace time.Duration, limit int) ([]store.ClaimedTask, error)
}

// WorkflowDescriber tells whether an attempt's workflow still runs (the Temporal client).
type WorkflowDescriber interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// OverdueGrace is how long past its processing timeout an attempt may stay in Processing
// before the sweeper checks its workflow.
const OverdueGrace = 2 * time.Minute

// PushTaskParams names one attempt; the payload stays in the database. The timeouts are the
// ones Temporal enforces on this attempt (fixed at the claim), so the push tells the worker
// exactly those.
type PushTaskParams struct {
	TaskID            string
	Version           int64
	Attempt           int
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration
}

// TaskOutcome is how an attempt ended: the worker's report (through the gateway's result
// callback, which completes the push activity by id) or the workflow's classification of a
// timeout, a refused push or a cancellation.
type TaskOutcome struct {
	Kind       string // store.OutcomeSuccess, OutcomeFailure, OutcomeTimeout, OutcomeCancelled
	StatusCode int
	Message    string
	Result     json.RawMessage
}

// FinishTaskParams ends one attempt.
type FinishTaskParams struct {
	TaskID  string
	Version int64
	Attempt int
	Outcome TaskOutcome
}

// FinishTaskResult is what finishing did.
type FinishTaskResult struct {
	Applied       bool
	Status        courier.TaskStatus
	NextAttemptAt time.Time
}

// TaskPush is the JSON body courier POSTs to a queue's push_url.
type TaskPush struct {
	TaskID      string          `json:"task_id"`
	TaskVersion int64           `json:"task_version"`
	Attempt     int             `json:"attempt"`
	Priority    int             `json:"priority"`
	Queue       string          `json:"queue"`
	Payload     json.RawMessage `json:"payload"`
	Deadline    time.Time       `json:"deadline"` // the processing timeout runs out at this time
	// HeartbeatTimeout, when set, is how often (at most) the worker must call HeartbeatURL.
	HeartbeatTimeout string `json:"heartbeat_timeout,omitempty"`
	ResultURL        string `json:"result_url"`    // POST the result here, naming the attempt
	HeartbeatURL     string `json:"heartbeat_url"` // POST here to show the attempt is alive
}

// Tasks pushes task attempts to workers and records how they end.
type Tasks struct {
	store         TaskStore
	publicURL     string // the gateway's address as workers reach it
	allowLoopback bool
	metrics       *metrics.Tasks
	wake          func() // nudges the claimers in this process after a slot is freed
	workflows     WorkflowDescriber
	clients       callback.Pool // one HTTP client (and connection pool) per push policy
}

// SetWorkflows lets the sweeper check overdue attempts' workflows; without it, that step is
// skipped.
func (a *Tasks) SetWorkflows(w WorkflowDescriber) { a.workflows = w }

// NewTasks builds the task activities. publicURL is the gateway's base URL for the report
// links; wake may be nil; m may be nil.
func NewTasks(s TaskStore, publicURL string, allowLoopback bool, m *metrics.Tasks, wake func()) *Tasks {
	if wake == nil {
		wake = func() {}
	}
	return &Tasks{store: s, publicURL: strings.TrimRight(publicURL, "/"), allowLoopback: allowLoopback, metrics: m, wake: wake}
}

func (a *Tasks) reportURL(taskID string, version int64, what string) string {
	return fmt.Sprintf("%s/v1/tasks/%s/versions/%d/%s", a.publicURL, url.PathEscape(taskID), version, what)
}

// Push sends one attempt to the queue's worker endpoint and leaves the activity open: the
// worker's result arrives through the gateway, which completes this activity by its id
// (courier.TaskAttemptActivityID). A worker that does not accept the push (non-2xx, refused
// address, no answer) fails the attempt.
func (a *Tasks) Push(ctx context.Context, p PushTaskParams) (TaskOutcome, error) {
	var (
		target store.PushTarget
		ok     bool
		err    error
	)
	// A database blip should not cost the task an attempt: try a few times within the push.
	for try, wait := 0, 200*time.Millisecond; ; try, wait = try+1, wait*4 {
		target, ok, err = a.store.MarkTaskPushed(ctx, p.TaskID, p.Version, p.Attempt, p.ProcessingTimeout)
		if err == nil || try == 3 || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return TaskOutcome{}, temporal.NewNonRetryableApplicationError("mark pushed: "+err.Error(), ErrTypePushFailed, err)
	}
	if !ok {
		return TaskOutcome{}, temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", ErrTypeTaskStale, nil)
	}
	t, q := target.Task, target.Queue
	if p.ProcessingTimeout > 0 { // runs recorded before the timeouts were passed read the queue's
		q.ProcessingTimeout, q.HeartbeatTimeout = p.ProcessingTimeout, p.HeartbeatTimeout
	}
	if q.PushURL == "" {
		return TaskOutcome{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("queue %q has no push_url", q.Name), ErrTypePushFailed, nil)
	}
	info := activity.GetInfo(ctx)
	push := TaskPush{TaskID: t.TaskID, TaskVersion: t.Version, Attempt: p.Attempt, Priority: t.Priority, Queue: t.Queue,
		Payload: t.Payload, Deadline: info.StartedTime.Add(q.ProcessingTimeout).UTC(),
		ResultURL: a.reportURL(t.TaskID, t.Version, "result"), HeartbeatURL: a.reportURL(t.TaskID, t.Version, "heartbeat")}
	if q.HeartbeatTimeout > 0 {
		push.HeartbeatTimeout = q.HeartbeatTimeout.String()
	}
	body, err := json.Marshal(push)
	if err != nil {
		return TaskOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypePushFailed, err)
	}
	var signer *webhook.Signer
	if len(q.Secrets) > 0 {
		if signer, err = webhook.NewSigner(q.Secrets...); err != nil {
			return TaskOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypePushFailed, err)
		}
	}
	client := a.clients.Client(callback.Options{AllowPrivate: q.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: 30 * time.Second})
	err = client.Send(ctx, callback.Request{URL: q.PushURL, Body: body, Signer: signer,
		DeliveryID: fmt.Sprintf("%s/%d", courier.TaskWorkflowID(t.TaskID, t.Version), p.Attempt)})
	if err != nil {
		return TaskOutcome{}, temporal.NewNonRetryableApplicationError("push: "+err.Error(), ErrTypePushFailed, err)
	}
	if a.metrics != nil && p.Attempt == 1 { // the task version's first push ever
		a.metrics.InsertToPush.Observe(time.Since(t.CreatedAt).Seconds())
	}
	return TaskOutcome{}, activity.ErrResultPending
}

// Finish ends an attempt in the database (status, result and the slot in one transaction)
// and wakes the claimers.
func (a *Tasks) Finish(ctx context.Context, p FinishTaskParams) (FinishTaskResult, error) {
	if string(p.Outcome.Result) == "null" {
		p.Outcome.Result = nil // no result: stored as NULL, not as the JSON literal
	}
	fr, err := a.store.FinishTaskAttempt(ctx, p.TaskID, p.Version, p.Attempt, store.AttemptOutcome{
		Kind: p.Outcome.Kind, StatusCode: p.Outcome.StatusCode, Message: p.Outcome.Message, Result: p.Outcome.Result})
	if err != nil {
		return FinishTaskResult{}, err
	}
	if fr.Applied {
		if a.metrics != nil {
			a.metrics.Results.WithLabelValues(fr.Queue, p.Outcome.Kind).Inc()
		}
		a.wake()
	}
	return FinishTaskResult{Applied: fr.Applied, Status: fr.Status, NextAttemptAt: fr.NextAttemptAt}, nil
}

// SweepParams bound one sweep.
type SweepParams struct {
	BatchSize  int // rows per statement; default 500
	MaxBatches int // statements per step and queue; default 20
}

// SweepResult counts what one sweep changed.
type SweepResult struct {
	Expired        int64 // pending past their pending timeout → failed
	Stopped        int64 // successes past retention → stopped
	Purged         int64 // finished rows past the purge age → deleted
	Orphaned       int   // attempts in Processing whose workflow had ended → finished as timed out
	LimiterRepairs int   // queues whose in_flight did not match their rows
}

// Sweep runs the lifecycle steps in bounded batches, then checks every queue's limiter count
// against its rows and repairs any mismatch.
func (a *Tasks) Sweep(ctx context.Context, p SweepParams) (SweepResult, error) {
	if p.BatchSize <= 0 {
		p.BatchSize = 500
	}
	if p.MaxBatches <= 0 {
		p.MaxBatches = 20
	}
	var res SweepResult
	batches := func(step func() (int64, error)) (int64, error) {
		var total int64
		for i := 0; i < p.MaxBatches; i++ {
			n, err := step()
			total += n
			activity.RecordHeartbeat(ctx, res)
			if err != nil || n < int64(p.BatchSize) {
				return total, err
			}
		}
		return total, nil
	}
	var err error
	if res.Expired, err = batches(func() (int64, error) { return a.store.ExpirePendingTasks(ctx, p.BatchSize) }); err != nil {
		return res, err
	}
	queues, err := a.store.ListQueues(ctx)
	if err != nil {
		return res, err
	}
	for _, q := range queues {
		n, err := batches(func() (int64, error) { return a.store.StopSucceededTasks(ctx, q.Name, q.SuccessRetention, p.BatchSize) })
		res.Stopped += n
		if err != nil {
			return res, err
		}
		n, err = batches(func() (int64, error) { return a.store.PurgeTasks(ctx, q.Name, q.PurgeAge, p.BatchSize) })
		res.Purged += n
		if err != nil {
			return res, err
		}
	}
	if a.workflows != nil {
		n, err := a.finishOrphans(ctx, p.BatchSize)
		res.Orphaned = n
		if err != nil {
			return res, err
		}
	}
	repairs, err := a.store.ReconcileLimiters(ctx)
	res.LimiterRepairs = len(repairs)
	for _, r := range repairs {
		activity.GetLogger(ctx).Warn("task limiter count repaired", "queue", r.Queue, "recorded", r.Recorded, "counted", r.Counted)
		if a.metrics != nil {
			a.metrics.LimiterRepairs.WithLabelValues(r.Queue).Inc()
		}
	}
	if res.Expired > 0 || res.Orphaned > 0 || len(repairs) > 0 {
		a.wake()
	}
	return res, err
}

// finishOrphans ends attempts still in Processing well past their processing timeout whose
// workflow no longer runs (terminated by an operator, or lost with a namespace): Temporal will
// never time them out, so without this their slots would stay taken. They are finished as
// timed out, so the queue's retry policy applies.
func (a *Tasks) finishOrphans(ctx context.Context, limit int) (int, error) {
	overdue, err := a.store.OverdueTasks(ctx, OverdueGrace, limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range overdue {
		d, err := a.workflows.DescribeWorkflowExecution(ctx, courier.TaskWorkflowID(t.TaskID, t.Version), "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			return n, err
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		}
		fr, err := a.store.FinishTaskAttempt(ctx, t.TaskID, t.Version, t.Attempt, store.AttemptOutcome{Kind: store.OutcomeTimeout,
			Message: "processing timeout: the attempt's workflow ended without recording a result"})
		if err != nil {
			return n, err
		}
		if fr.Applied {
			n++
			activity.GetLogger(ctx).Warn("finished an orphaned task attempt", "task_id", t.TaskID, "version", t.Version, "attempt", t.Attempt)
			if a.metrics != nil {
				a.metrics.Results.WithLabelValues(t.Queue, store.OutcomeTimeout).Inc()
			}
		}
		activity.RecordHeartbeat(ctx, n)
	}
	return n, nil
}
