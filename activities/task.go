package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/webhook"
)

// TaskStore is what the task activities need from the database.
type TaskStore interface {
	MarkTaskPushed(ctx context.Context, taskID string, version int64, attempt int, processingTimeout time.Duration, run store.AttemptRun) (store.PushTarget, bool, error)
	FinishTaskAttempt(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome) (store.FinishResult, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
	ExpirePendingTasks(ctx context.Context, limit int) (int64, error)
	StopSucceededTasks(ctx context.Context, queue string, retention time.Duration, limit int) (int64, error)
	PurgeTasks(ctx context.Context, queue string, age time.Duration, limit int) (int64, error)
	ReconcileLimiters(ctx context.Context) ([]store.LimiterRepair, error)
	OverdueTasks(ctx context.Context, grace time.Duration, limit int) ([]dispatch.Attempt, error)
	MarkBatchPushed(ctx context.Context, batch string, attempts []store.BatchAttempt) ([]courier.Task, error)
	StartBatchedHeartbeats(ctx context.Context, attempts []store.AttemptKey, after time.Duration) error
	MoveBatchedAttempts(ctx context.Context, from, to string, attempts []store.AttemptKey, after time.Duration) (int, error)
	GetQueue(ctx context.Context, name string) (courier.Queue, error)
}

// WorkflowDescriber tells whether an attempt's workflow still runs (the Temporal client).
type WorkflowDescriber interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// OverdueGrace is how long past its processing timeout an attempt may stay in Processing
// before the sweeper checks its workflow.
const OverdueGrace = 2 * time.Minute

// Tasks pushes task attempts to workers and records how they end.
type Tasks struct {
	store         TaskStore
	publicURL     string // the gateway's address as workers reach it
	allowLoopback bool
	metrics       *metrics.Tasks
	wake          func() // nudges the claimers in this process after a slot is freed
	workflows     WorkflowDescriber
	retryPush     func(ctx context.Context, p contract.PushBatchParams, delay time.Duration) error
	clients       callback.Pool // one HTTP client (and connection pool) per push policy
	// localPushes bounds the pushes that run as local activities, which the push worker's
	// activity slots do not bound: one token per push in flight (nil: unbounded).
	localPushes chan struct{}
}

// TasksDeps are what the task activities work with. Store is required; the rest may be zero.
type TasksDeps struct {
	Store TaskStore
	// PublicURL is the gateway's base URL as task workers reach it, for the result and
	// heartbeat links in every push.
	PublicURL string
	// AllowLoopback lets pushes reach 127.0.0.1 (courier dev only).
	AllowLoopback bool
	// LocalPushSlots bounds the pushes this process's local activities make at once (attempts
	// without a heartbeat timeout), as the push worker's activity slots bound the others: a
	// stuck endpoint holds at most this many, and the runs' finishes, which share the
	// local-activity slots, never wait behind them. 0: unbounded.
	LocalPushSlots int
	// Workflows lets the sweeper check overdue attempts' workflows (the Temporal client); nil
	// skips that step.
	Workflows WorkflowDescriber
	// RetryPush starts, after delay, the run that makes the next try of a batched request that
	// failed on the way (p.Try), so the batch the request leaves is not held open by its
	// tries; nil: a batch's run makes its requests' tries itself.
	RetryPush func(ctx context.Context, p contract.PushBatchParams, delay time.Duration) error
	Metrics   *metrics.Tasks // nil records nothing
	Wake      func()         // nudges the claimers after a slot is freed; nil: none
}

// NewTasks builds the task activities.
func NewTasks(d TasksDeps) *Tasks {
	a := &Tasks{store: d.Store, publicURL: strings.TrimRight(d.PublicURL, "/"), allowLoopback: d.AllowLoopback,
		metrics: d.Metrics, wake: d.Wake, workflows: d.Workflows, retryPush: d.RetryPush}
	if a.wake == nil {
		a.wake = func() {}
	}
	if d.LocalPushSlots > 0 {
		a.localPushes = make(chan struct{}, d.LocalPushSlots)
	}
	return a
}

func (a *Tasks) reportURL(taskID string, version int64, what string) string {
	return fmt.Sprintf("%s/v1/tasks/%s/versions/%d/%s", a.publicURL, url.PathEscape(taskID), version, what)
}

// pushRequest is one attempt's push, ready to send.
type pushRequest struct {
	target store.PushTarget
	req    callback.Request
}

// preparePush marks the attempt pushed (guarded by "Processing on this attempt", recording the
// run, its heartbeat timeout and the deadline) and builds its request. Its errors are final for
// the attempt: a stale attempt, a queue without a push_url, a database that stayed down.
func (a *Tasks) preparePush(ctx context.Context, p contract.PushTaskParams, runID string) (pushRequest, error) {
	var (
		target store.PushTarget
		ok     bool
		err    error
	)
	remaining := max(time.Until(p.Deadline), 0)
	// A database blip should not cost the task an attempt: try a few times within the push.
	for try, wait := 0, 200*time.Millisecond; ; try, wait = try+1, wait*4 {
		target, ok, err = a.store.MarkTaskPushed(ctx, p.TaskID, p.Version, p.Attempt, remaining, store.AttemptRun{ID: runID, HeartbeatTimeout: p.HeartbeatTimeout})
		if err == nil || try == 3 || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	if err != nil {
		return pushRequest{}, temporal.NewNonRetryableApplicationError("mark pushed: "+err.Error(), contract.ErrTypePushFailed, err)
	}
	if !ok {
		return pushRequest{}, temporal.NewNonRetryableApplicationError("task is no longer processing this attempt", contract.ErrTypeTaskStale, nil)
	}
	t, q := target.Task, target.Queue
	if q.PushURL == "" {
		return pushRequest{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("queue %q has no push_url", q.Name), contract.ErrTypePushFailed, nil)
	}
	push := api.TaskPush{TaskID: t.TaskID, TaskVersion: t.Version, Attempt: p.Attempt, Priority: t.Priority, Queue: t.Queue, ConcurrencyKey: t.ConcurrencyKey,
		Payload: t.Payload, Deadline: p.Deadline.UTC(), HeartbeatTimeout: api.PositiveDuration(p.HeartbeatTimeout),
		ResultURL: a.reportURL(t.TaskID, t.Version, "result"), HeartbeatURL: a.reportURL(t.TaskID, t.Version, "heartbeat")}
	body, err := json.Marshal(push)
	if err != nil {
		return pushRequest{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePushFailed, err)
	}
	var signer *webhook.Signer
	if len(q.Secrets) > 0 {
		if signer, err = webhook.NewSigner(q.Secrets...); err != nil {
			return pushRequest{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePushFailed, err)
		}
	}
	// Every try of one attempt carries the same webhook-id: a worker that got a try whose
	// answer was lost recognises the next one.
	return pushRequest{target: target, req: callback.Request{URL: q.PushURL, Body: body, Signer: signer,
		DeliveryID: courier.TaskAttemptDeliveryID(t.TaskID, t.Version, p.Attempt)}}, nil
}

func (a *Tasks) client(q courier.Queue, timeout time.Duration) *callback.Client {
	return a.clients.Client(callback.Options{AllowPrivate: q.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: timeout})
}

func (a *Tasks) observePushed(t courier.Task, attempt int) {
	if a.metrics != nil && attempt == 1 { // the task version's first push ever
		a.metrics.ObserveInsertToPush(t.Queue, time.Since(t.CreatedAt).Seconds())
	}
}

// SendPush sends one attempt without a heartbeat timeout to the queue's worker endpoint and
// returns once the worker has answered 2xx; it runs as a local activity of the attempt's run,
// bounded by LocalPushSlots, and the run then waits for the result itself. A try that fails on
// the way (no connection, no answer within the push timeout, 429 or 5xx) is a retryable error
// that the workflow's push policy tries again within the attempt, after the worker's
// Retry-After when it sent one; a 4xx answer or a refused address fails the attempt at once.
func (a *Tasks) SendPush(ctx context.Context, p contract.PushTaskParams) (contract.SendPushResult, error) {
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity && a.localPushes != nil {
		select {
		case a.localPushes <- struct{}{}:
			defer func() { <-a.localPushes }()
		case <-ctx.Done():
			return contract.SendPushResult{}, ctx.Err()
		}
	}
	pr, err := a.preparePush(ctx, p, info.WorkflowExecution.RunID)
	if err != nil {
		return contract.SendPushResult{}, err
	}
	timeout := p.PushTimeout
	if timeout <= 0 {
		timeout = courier.DefaultPushTimeout
	}
	err = a.client(pr.target.Queue, timeout).Send(ctx, pr.req)
	var ce *callback.Error
	switch {
	case err == nil:
		a.observePushed(pr.target.Task, p.Attempt)
		return contract.SendPushResult{Try: info.Attempt}, nil
	case ctx.Err() != nil:
		return contract.SendPushResult{}, ctx.Err() // the activity's own timeout or a cancel: Temporal classifies it
	case errors.As(err, &ce) && ce.Retryable:
		// Expected: the worker is down, busy or slow. Tried again within the attempt; benign, so
		// the SDK does not log each try as an error.
		return contract.SendPushResult{}, temporal.NewApplicationErrorWithOptions("push: "+err.Error(), contract.ErrTypePushUnanswered,
			temporal.ApplicationErrorOptions{Cause: err, NextRetryDelay: ce.RetryAfter, Category: temporal.ApplicationErrorCategoryBenign})
	default:
		return contract.SendPushResult{}, refusedPush("push: "+err.Error(), err)
	}
}

// Finish ends an attempt in the database (status, result and the slot in one transaction)
// and wakes the claimers. A success the gateway recorded as it accepted it is found recorded:
// nothing changes, and the run's outcome is that success.
func (a *Tasks) Finish(ctx context.Context, p contract.FinishTaskParams) (contract.FinishTaskResult, error) {
	tracing.Link(ctx, p.Outcome.Trace, attribute.String("courier.link", "task result"))
	fr, err := a.store.FinishTaskAttempt(ctx, p.TaskID, p.Version, p.Attempt, p.Outcome)
	if err != nil {
		return contract.FinishTaskResult{}, err
	}
	if fr.Applied {
		if a.metrics != nil {
			a.metrics.Results.WithLabelValues(fr.Queue, string(p.Outcome.Kind)).Inc()
		}
		a.wake()
	}
	// Recorded, not Applied: a success the gateway recorded as it accepted it is this
	// workflow's outcome too.
	return contract.FinishTaskResult{Applied: fr.Recorded, Status: fr.Status, NextAttemptAt: fr.NextAttemptAt}, nil
}

// Sweep runs the lifecycle steps in bounded batches, then checks every queue's limiter count
// against its rows and repairs any mismatch.
func (a *Tasks) Sweep(ctx context.Context, p contract.SweepParams) (contract.SweepResult, error) {
	defaults.UnlessPositive(&p.BatchSize, 500)
	defaults.UnlessPositive(&p.MaxBatches, 20)
	var res contract.SweepResult
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
		fr, err := a.store.FinishTaskAttempt(ctx, t.TaskID, t.Version, t.Attempt, contract.AttemptOutcome{Kind: courier.OutcomeTimeout,
			Message: "processing timeout: the attempt's workflow ended without recording a result"})
		if err != nil {
			return n, err
		}
		if fr.Applied {
			n++
			activity.GetLogger(ctx).Warn("finished an orphaned task attempt", "task_id", t.TaskID, "version", t.Version, "attempt", t.Attempt)
			if a.metrics != nil {
				a.metrics.Results.WithLabelValues(t.Queue, string(courier.OutcomeTimeout)).Inc()
			}
		}
		activity.RecordHeartbeat(ctx, n)
	}
	return n, nil
}
