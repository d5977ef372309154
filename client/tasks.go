package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// TaskOverrides replace the queue's settings for one task. Zero fields keep the queue's.
type TaskOverrides = api.TaskOverrides

// TaskRequest inserts a task version (POST /v1/tasks, scope producer). The same version again
// returns the stored task (or replaces one that is pending with other content, failed, stopped
// or cancelled), so an insert is retried safely; a version below the highest known is
// ErrConflict with details.current_version.
type TaskRequest = api.TaskRequest

// Task is a task version as the API shows it; Outcome says what InsertTask did.
type Task = api.Task

// TaskPage is one page of a task list, newest first; its items leave out payload and result.
type TaskPage = api.TaskPage

// TaskQuery selects task versions for ListTasks. Zero fields do not filter.
type TaskQuery struct {
	Queue          string
	Status         courier.TaskStatus
	Priority       int       // 1 to 5
	ConcurrencyKey string    // the tasks of one concurrency key
	CreatedAfter   time.Time // created at or after
	CreatedBefore  time.Time // created before
	Limit          int       // versions per page, 1–1000; 0: the gateway's default (100)
	PageToken      string    // TaskPage.NextPageToken of the previous page
}

// ReportAccepted answers a result or heartbeat that reached its attempt.
type ReportAccepted = api.ReportAccepted

func taskVersionPath(taskID string, version int64) string {
	return "/v1/tasks/" + seg(taskID) + "/versions/" + strconv.FormatInt(version, 10)
}

// InsertTask inserts a task version; Task.Outcome says what the insert did.
func (c *Client) InsertTask(ctx context.Context, r TaskRequest) (*Task, error) {
	return fetch[Task](ctx, c, call{method: http.MethodPost, path: "/v1/tasks", body: r, idempotent: true})
}

// ListTasks reads one page of task versions, newest first, without payloads and results (GET
// a version for those); pass the page's NextPageToken as q.PageToken for the next one, or use
// AllTasks.
func (c *Client) ListTasks(ctx context.Context, q TaskQuery) (*TaskPage, error) {
	v := listQuery{}.text("queue", q.Queue).text("status", string(q.Status)).text("page_token", q.PageToken).
		text("concurrency_key", q.ConcurrencyKey).number("priority", q.Priority).number("limit", q.Limit).
		time("created_after", q.CreatedAfter).time("created_before", q.CreatedBefore)
	return fetch[TaskPage](ctx, c, call{method: http.MethodGet, path: "/v1/tasks", query: url.Values(v), idempotent: true})
}

// AllTasks yields every task version q selects, page after page, starting at q.PageToken. It
// stops at the first error, which it yields.
func (c *Client) AllTasks(ctx context.Context, q TaskQuery) iter.Seq2[Task, error] {
	return pages(&q.PageToken, func() (*api.List[Task], error) { return c.ListTasks(ctx, q) })
}

// GetTask reads the latest stored version of a task.
func (c *Client) GetTask(ctx context.Context, taskID string) (*Task, error) {
	return fetch[Task](ctx, c, call{method: http.MethodGet, path: "/v1/tasks/" + seg(taskID), idempotent: true})
}

// GetTaskVersion reads one version of a task.
func (c *Client) GetTaskVersion(ctx context.Context, taskID string, version int64) (*Task, error) {
	return fetch[Task](ctx, c, call{method: http.MethodGet, path: taskVersionPath(taskID, version), idempotent: true})
}

// CancelTask cancels a pending or processing task version (a cancelled one is returned as it
// is; a finished one is ErrConflict).
func (c *Client) CancelTask(ctx context.Context, taskID string, version int64) (*Task, error) {
	return fetch[Task](ctx, c, call{method: http.MethodDelete, path: taskVersionPath(taskID, version), idempotent: true})
}

// RetryTask makes a failed or cancelled version pending again with a fresh retry budget, as
// re-submitting it with its own content would (POST /v1/tasks/{id}/versions/{v}/retry). Only a
// task's highest version can be retried: another, or another status, is ErrConflict.
func (c *Client) RetryTask(ctx context.Context, taskID string, version int64) (*Task, error) {
	return fetch[Task](ctx, c, call{method: http.MethodPost, path: taskVersionPath(taskID, version) + "/retry"})
}

// TaskBulkFilter selects tasks for CancelTasks and RetryTasks. Zero fields do not filter; Max
// nil takes the gateway's default (1,000), at most 10,000.
type TaskBulkFilter = api.TaskBulkFilter

// TaskCancelResult says what CancelTasks did.
type TaskCancelResult = api.TaskCancelResult

// TaskRetryResult says what RetryTasks did.
type TaskRetryResult = api.TaskRetryResult

// CancelTasks cancels the pending and processing tasks f matches, newest first, each as
// CancelTask does (POST /v1/tasks/bulk/cancel, scope admin). Call again while More is true.
// Safe to retry: a repeat only finds tasks still pending or processing.
func (c *Client) CancelTasks(ctx context.Context, f TaskBulkFilter) (*TaskCancelResult, error) {
	return fetch[TaskCancelResult](ctx, c, call{method: http.MethodPost, path: "/v1/tasks/bulk/cancel", body: f, idempotent: true})
}

// RetryTasks makes the failed and cancelled tasks f matches (each task id's highest version)
// pending again with a fresh retry budget, as re-submitting each would (POST
// /v1/tasks/bulk/retry, scope admin). Call again while More is true. Safe to retry: a repeat
// only finds tasks still failed or cancelled.
func (c *Client) RetryTasks(ctx context.Context, f TaskBulkFilter) (*TaskRetryResult, error) {
	return fetch[TaskRetryResult](ctx, c, call{method: http.MethodPost, path: "/v1/tasks/bulk/retry", body: f, idempotent: true})
}

// ReportResult reports how an attempt ended (scope worker): Accepted when r.Attempt is the
// attempt running; ErrConflict when it is not (it timed out, was cancelled, superseded, or
// already has its outcome), and then nothing changed. Not retried on 503 or a lost answer: a
// repeat of an accepted result is ErrConflict (the taskworker package retries it and reads that
// 409 as "over").
func (c *Client) ReportResult(ctx context.Context, taskID string, version int64, r api.TaskResult) (*ReportAccepted, error) {
	return fetch[ReportAccepted](ctx, c, call{method: http.MethodPost, path: taskVersionPath(taskID, version) + "/result", body: r})
}

// TaskResultItem is one attempt's result in ReportResults: the task version it belongs to and
// the result as ReportResult takes it.
type TaskResultItem = api.TaskResultItem

// TaskResultsAnswer answers ReportResults: one answer per result, in the request's order.
type TaskResultsAnswer = api.TaskResultsAnswer

// TaskResultAnswer is the answer to one result of ReportResults; ResultError reads it as an
// error.
type TaskResultAnswer = api.TaskResultAnswer

// MaxTaskResults is the most results one ReportResults may carry.
const MaxTaskResults = api.MaxTaskResults

// ReportResults reports how many attempts ended, in one request (POST /v1/tasks/results, scope
// worker; 1 to MaxTaskResults results, for the attempts of any queues). Each result is checked
// and recorded on its own: the answer holds one TaskResultAnswer per result, in order, and
// ResultError reads each as ReportResult would have returned it (nil when accepted, ErrConflict
// when the attempt is not running or already has its outcome, ErrNotFound, ErrValidation). An
// error means nothing was recorded (ErrUnavailable: send them all again). Retried like
// ReportResult, only on a 429 or a connection never opened: a repeat of an accepted result is a
// 409 for that result.
func (c *Client) ReportResults(ctx context.Context, results []TaskResultItem) (*TaskResultsAnswer, error) {
	out, err := fetch[TaskResultsAnswer](ctx, c, call{method: http.MethodPost, path: "/v1/tasks/results", body: api.TaskResults{Results: results}})
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(results) {
		return nil, fmt.Errorf("courier: POST /v1/tasks/results: %d answers to %d results", len(out.Results), len(results))
	}
	return out, nil
}

// ResultError is one answer of ReportResults as an error: nil for an accepted result (202),
// otherwise an *Error with the status and code POST …/result would have answered, which
// matches the sentinels (errors.Is(err, ErrConflict): the attempt is over).
func ResultError(a TaskResultAnswer) error {
	if a.Status == http.StatusAccepted {
		return nil
	}
	e := &Error{StatusCode: a.Status, Code: api.CodeOfStatus(a.Status), Method: http.MethodPost,
		Path: taskVersionPath(a.TaskID, a.TaskVersion) + "/result"}
	if a.Error != nil {
		if a.Error.Code != "" {
			e.Code = a.Error.Code
		}
		e.Message, e.Details = a.Error.Message, a.Error.Details
	}
	return e
}

// Heartbeat tells courier that attempt is alive (scope worker), extending its heartbeat
// timeout; details (optional JSON) is recorded with it. ErrConflict means the attempt is over:
// stop working on it.
func (c *Client) Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) (*ReportAccepted, error) {
	return fetch[ReportAccepted](ctx, c, call{method: http.MethodPost, path: taskVersionPath(taskID, version) + "/heartbeat",
		body: api.Heartbeat{Attempt: attempt, Details: details}, idempotent: true})
}

// QueueConfig is a queue's configuration (PUT /v1/queues/{name}, scope admin). A PUT replaces
// the whole configuration; zero fields take their defaults (docs/tasks.md), except Secrets: nil
// keeps the stored ones, an empty non-nil slice removes them.
type QueueConfig = api.QueueConfig

// Queue is a queue as the API shows it; Created says PutQueue created it.
type Queue = api.Queue

// PutQueue creates or replaces a queue (scope admin).
func (c *Client) PutQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	out, st, err := fetchStatus[Queue](ctx, c, call{method: http.MethodPut, path: "/v1/queues/" + seg(name), body: cfg, idempotent: true})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return out, nil
}

// GetQueue reads one queue (scope admin).
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	return fetch[Queue](ctx, c, call{method: http.MethodGet, path: "/v1/queues/" + seg(name), idempotent: true})
}

// ListQueues reads every queue (scope admin).
func (c *Client) ListQueues(ctx context.Context) ([]Queue, error) {
	return allByName[Queue](ctx, c, "/v1/queues")
}

// DeleteQueue deletes a queue and its finished tasks (scope admin). A queue that still has
// pending or processing tasks is ErrConflict (the error's Details count them); a queue that
// does not exist is ErrNotFound, also when a retried call finds it already deleted.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/queues/" + seg(name), idempotent: true})
	return err
}
