package api

import (
	"encoding/json"
	"time"

	"github.com/courier-oss/courier"
)

// TaskOverrides replace the queue's settings for one task; zero fields keep the queue's.
type TaskOverrides struct {
	PendingTimeout    PositiveDuration `json:"pending_timeout,omitzero"`
	ProcessingTimeout PositiveDuration `json:"processing_timeout,omitzero"`
	HeartbeatTimeout  PositiveDuration `json:"heartbeat_timeout,omitzero"`
	MaxAttempts       int              `json:"max_attempts,omitempty"`
}

// overridesOf shows a task's overrides.
func overridesOf(o courier.TaskOverrides) TaskOverrides {
	return TaskOverrides{PendingTimeout: PositiveDuration(o.PendingTimeout), ProcessingTimeout: PositiveDuration(o.ProcessingTimeout),
		HeartbeatTimeout: PositiveDuration(o.HeartbeatTimeout), MaxAttempts: o.MaxAttempts}
}

// Domain is the overrides as courier keeps them.
func (o TaskOverrides) Domain() courier.TaskOverrides {
	return courier.TaskOverrides{PendingTimeout: o.PendingTimeout.Std(), ProcessingTimeout: o.ProcessingTimeout.Std(),
		HeartbeatTimeout: o.HeartbeatTimeout.Std(), MaxAttempts: o.MaxAttempts}
}

// TaskRequest is the body of POST /v1/tasks (scope producer). The same version again returns
// the stored task (or replaces one that is pending with other content, failed, stopped or
// cancelled), so an insert is retried safely; a version below the highest known is a conflict
// with details.current_version.
type TaskRequest struct {
	TaskID      string          `json:"task_id"`
	TaskVersion int64           `json:"task_version"`       // at least 1
	Priority    int             `json:"priority,omitempty"` // 1 (high) to 5 (low); 0: 3
	Queue       string          `json:"queue,omitempty"`    // "": default
	Payload     json.RawMessage `json:"payload,omitempty"`  // any JSON; pushed to the worker as it is
	Overrides   TaskOverrides   `json:"overrides,omitzero"`
	// ConcurrencyKey groups tasks for the queue's per-key limit and turns (a tenant, a
	// customer); "": none.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// Domain is the request as the task service takes it.
func (r TaskRequest) Domain() courier.TaskRequest {
	return courier.TaskRequest{TaskID: r.TaskID, Version: r.TaskVersion, Priority: r.Priority, Queue: r.Queue,
		Payload: r.Payload, Overrides: r.Overrides.Domain(), ConcurrencyKey: r.ConcurrencyKey}
}

// TaskRequestOf is the body that asks for r (the outbox's task rows carry it too).
func TaskRequestOf(r courier.TaskRequest) TaskRequest {
	return TaskRequest{TaskID: r.TaskID, TaskVersion: r.Version, Priority: r.Priority, Queue: r.Queue,
		Payload: r.Payload, Overrides: overridesOf(r.Overrides), ConcurrencyKey: r.ConcurrencyKey}
}

// Task is a task version as the API shows it.
type Task struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Queue       string `json:"queue"`
	Priority    int    `json:"priority"`
	// ConcurrencyKey is the task's key for its queue's per-key limit and turns; left out when none.
	ConcurrencyKey string                    `json:"concurrency_key,omitempty"`
	Status         courier.TaskStatus        `json:"status"`
	Outcome        courier.TaskInsertOutcome `json:"outcome,omitempty"` // an insert's answer only: created, replaced, existing
	Payload        json.RawMessage           `json:"payload,omitempty"` // left out of lists
	Overrides      TaskOverrides             `json:"overrides"`
	Attempt        int                       `json:"attempt"`  // the current attempt's number (name it in results)
	Attempts       int                       `json:"attempts"` // attempts used since the task was (re)submitted
	Result         json.RawMessage           `json:"result,omitempty"`
	StatusCode     int                       `json:"status_code,omitempty"`
	Message        string                    `json:"message,omitempty"`
	// WorkflowID is the run that pushes the current attempt: the task's own
	// (task/<id>/<version>), or in the batched mode its batch's (task-batch/<queue>/<batch>).
	WorkflowID    string     `json:"workflow_id"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"` // pending tasks only
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`      // pending tasks only
	ClaimedAt     *time.Time `json:"claimed_at,omitempty"`
	PushedAt      *time.Time `json:"pushed_at,omitempty"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	// QueuePaused is set on a pending task while its queue is paused: it is kept, and claimed
	// on the resume.
	QueuePaused *Pause `json:"queue_paused,omitempty"`
}

// TaskOf shows a stored task version.
func TaskOf(t courier.Task) Task {
	out := Task{
		TaskID: t.TaskID, TaskVersion: t.Version, Queue: t.Queue, Priority: t.Priority, ConcurrencyKey: t.ConcurrencyKey, Status: t.Status,
		Payload: t.Payload, Overrides: overridesOf(t.Overrides), Attempt: t.Attempt, Attempts: t.Attempts,
		Result: t.Result, StatusCode: t.StatusCode, Message: t.Message, WorkflowID: t.Batch,
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, ClaimedAt: t.ClaimedAt, PushedAt: t.PushedAt, FinishedAt: t.FinishedAt,
	}
	if out.WorkflowID == "" { // an attempt with a run of its own, or none yet
		out.WorkflowID = courier.TaskWorkflowID(t.TaskID, t.Version)
	}
	if t.Status == courier.TaskPending {
		next := t.NextAttemptAt
		out.NextAttemptAt = &next
		out.ExpiresAt = t.ExpiresAt
	}
	return out
}

// TaskPage is one page of a task list (GET /v1/tasks), newest first; its items leave out the
// payload and the result (GET one version for those). NextPageToken is empty on the last page.
type TaskPage = List[Task]

// TaskResult is the body of POST /v1/tasks/{task_id}/versions/{v}/result (scope worker): a
// worker's report for one attempt, naming the attempt. The gateway hands it to the attempt's run
// as a contract.AttemptOutcome.
type TaskResult struct {
	Attempt    int                 `json:"attempt"`
	Status     courier.OutcomeKind `json:"status"` // success or failure (OutcomeKind.Reportable)
	StatusCode int                 `json:"status_code"`
	Message    string              `json:"message"`
	Result     json.RawMessage     `json:"result,omitempty"`
}

// Heartbeat is the body of POST /v1/tasks/{task_id}/versions/{v}/heartbeat (scope worker).
type Heartbeat struct {
	Attempt int             `json:"attempt"`
	Details json.RawMessage `json:"details,omitempty"` // optional JSON, recorded with it
}

// ReportAccepted answers a result or heartbeat that reached its attempt.
type ReportAccepted struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Accepted    bool   `json:"accepted"`
}

// TaskPush is the body courier POSTs to a queue's push_url for one attempt (signed like a
// callback). The worker answers 2xx to take it, then reports to ResultURL naming Attempt.
type TaskPush struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Priority    int    `json:"priority"`
	Queue       string `json:"queue"`
	// ConcurrencyKey is the task's concurrency key; left out when none.
	ConcurrencyKey string          `json:"concurrency_key,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Deadline       time.Time       `json:"deadline"` // the processing timeout runs out at this time
	// HeartbeatTimeout is how long courier waits between heartbeats before it fails the
	// attempt; zero (left out) when the queue wants no heartbeats.
	HeartbeatTimeout PositiveDuration `json:"heartbeat_timeout,omitzero"`
	ResultURL        string           `json:"result_url"`    // POST the result here, naming the attempt
	HeartbeatURL     string           `json:"heartbeat_url"` // POST here to show the attempt is alive
	// DeliveryID is the attempt's delivery id, the same on every push of this attempt (a
	// single push's webhook-id): a worker that took it already recognises a repeat.
	DeliveryID string `json:"delivery_id,omitempty"`
	// ResultsURL takes the results of many attempts at once (TaskResults); set for the tasks of
	// a queue in the batched dispatch mode.
	ResultsURL string `json:"results_url,omitempty"`
	// Traceparent and Tracestate are this attempt's W3C trace context in a batched push
	// (TaskPushBatch), whose request headers carry the batch's: continue them to stay in the
	// task's own trace. A single push carries its task's in its headers and leaves them out.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// PushAnswer is what a worker built on taskworker answers a push with (202): it took the
// attempt, or already runs it or a newer one (Duplicate). courier reads only the status.
type PushAnswer struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Accepted    bool   `json:"accepted"`
	Duplicate   bool   `json:"duplicate,omitempty"` // this attempt (or a newer one) already runs here
}

// TaskBulkFilter is the body of POST /v1/tasks/bulk/cancel and POST /v1/tasks/bulk/retry
// (scope admin): which tasks to act on. Zero fields do not filter. Each action matches only the statuses it
// applies to (cancel: pending and processing; retry: failed and cancelled, each task id's
// highest version only), so Status can only narrow those.
type TaskBulkFilter struct {
	Queue    string             `json:"queue,omitempty"`
	Status   courier.TaskStatus `json:"status,omitempty"`
	Priority int                `json:"priority,omitempty"` // 1 (high) to 5 (low); 0: every priority
	// ConcurrencyKey takes the tasks of one concurrency key (flow control); "": any.
	ConcurrencyKey string     `json:"concurrency_key,omitempty"`
	CreatedAfter   *time.Time `json:"created_after,omitempty"`  // created at or after
	CreatedBefore  *time.Time `json:"created_before,omitempty"` // created before
	// Max is how many tasks to take at most, 1 to 10,000; left out: 1,000. An explicit 0 is
	// refused.
	Max *int `json:"max,omitempty"`
}

// Filter is the filter as the task service takes it (Max apart).
func (f TaskBulkFilter) Filter() courier.TaskFilter {
	out := courier.TaskFilter{Queue: f.Queue, Status: f.Status, Priority: f.Priority, ConcurrencyKey: f.ConcurrencyKey}
	if f.CreatedAfter != nil {
		out.CreatedAfter = *f.CreatedAfter
	}
	if f.CreatedBefore != nil {
		out.CreatedBefore = *f.CreatedBefore
	}
	return out
}

// TaskCancelResult says what a bulk cancel (POST /v1/tasks/bulk/cancel) did: Done tasks
// cancelled (a processing one's slot freed), Skipped finished or changed before the cancel
// reached them.
type TaskCancelResult struct {
	BulkResult
}

// TaskRetryResult says what a bulk retry (POST /v1/tasks/bulk/retry) did: Done tasks made
// pending again with a fresh retry budget, Skipped changed before the retry reached them
// (re-submitted, a newer version, purged).
type TaskRetryResult struct {
	BulkResult
}

// TaskPushBatch is the body courier POSTs to a queue's push_url for several attempts at once,
// when the queue's push_batch_size is above 1 (signed like a single push, its webhook-id the
// batch's own). Each task carries its own delivery_id. The worker answers 2xx to take the
// attempts, naming in a TaskPushBatchAnswer those it refuses; a 2xx without a body takes them
// all. Any other answer is the whole batch's, as for a single push.
type TaskPushBatch struct {
	Tasks []TaskPush `json:"tasks"`
	// ResultsURL takes many results at once (POST, TaskResults), as each task's result_url
	// takes its own.
	ResultsURL string `json:"results_url"`
}

// TaskPushBatchAnswer is a worker's 2xx answer to a TaskPushBatch: the attempts it refuses.
// A refused attempt ends as a failure with the status code and message given (the queue's
// retry policy decides what follows); every other attempt of the batch is the worker's.
type TaskPushBatchAnswer struct {
	Refused []TaskRefusal `json:"refused,omitempty"`
}

// TaskRefusal names one refused attempt of a batched push, and why.
type TaskRefusal struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	StatusCode  int    `json:"status_code,omitempty"` // as a single push's answer would have been (e.g. 429, 503); 0: none
	Message     string `json:"message,omitempty"`
}

// TaskResults is the body of POST /v1/tasks/results (scope worker): results of many attempts,
// up to MaxTaskResults, each checked and recorded on its own, as POST …/result would.
type TaskResults struct {
	Results []TaskResultItem `json:"results"`
}

// MaxTaskResults bounds the results of one POST /v1/tasks/results.
const MaxTaskResults = 1000

// TaskResultItem is one attempt's result in a TaskResults: the task version it belongs to and
// the result as POST …/result takes it.
type TaskResultItem struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	TaskResult
}

// TaskResultsAnswer answers a TaskResults (200): one answer per result, in the same order.
type TaskResultsAnswer struct {
	Results []TaskResultAnswer `json:"results"`
}

// TaskResultAnswer is the answer to one result of a TaskResults: Status is the HTTP status
// POST …/result would have answered (202 accepted; 409 the attempt is not running, or already
// has its result; 404 no such task; 422 a malformed result; 503 try again), with the error
// for anything but 202.
type TaskResultAnswer struct {
	TaskID      string       `json:"task_id"`
	TaskVersion int64        `json:"task_version"`
	Attempt     int          `json:"attempt"`
	Status      int          `json:"status"`
	Error       *ErrorDetail `json:"error,omitempty"`
}
