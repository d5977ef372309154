package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// MaxTaskPayloadBytes bounds a task's payload (it stays in the database and is pushed to the
// worker as it is).
const MaxTaskPayloadBytes = 512 << 10

// TaskService is what the task and queue endpoints need.
type TaskService interface {
	Insert(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error)
	Get(ctx context.Context, taskID string, version int64) (courier.Task, error)
	Latest(ctx context.Context, taskID string) (courier.Task, error)
	List(ctx context.Context, f courier.TaskFilter) ([]courier.Task, bool, error)
	Cancel(ctx context.Context, taskID string, version int64) (courier.Task, error)
	Retry(ctx context.Context, taskID string, version int64) (courier.Task, error)
	// CancelMatching and RetryMatching are the bulk actions: each task through the single
	// action's path, up to max of them (see tasks.Service).
	CancelMatching(ctx context.Context, f courier.TaskFilter, max int) (courier.TaskBulkResult, error)
	RetryMatching(ctx context.Context, f courier.TaskFilter, max int) (courier.TaskBulkResult, error)
	// Report records a worker's result; the caller calls release once the worker has been
	// answered, and only then is the slot the result freed handed out again.
	Report(ctx context.Context, taskID string, version int64, r api.TaskResult) (release func(), err error)
	// ReportMany records many results, each answered on its own (errs[i] nil: recorded);
	// release as Report's.
	ReportMany(ctx context.Context, results []api.TaskResultItem) (errs []error, release func(), err error)
	Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) error
	PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error)
	GetQueue(ctx context.Context, name string) (courier.Queue, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
	// DeleteQueue deletes a queue and its finished tasks; pending or processing tasks make it
	// a conflict.
	DeleteQueue(ctx context.Context, name string) error
}

// taskRequest reads the task version the path names and the request's JSON body.
func taskRequest[B any](c echo.Context) (string, int64, B, error) {
	var req B
	id, v, err := taskPath(c)
	if err == nil {
		err = bindJSON(c, &req)
	}
	return id, v, req, err
}

// taskPath reads :task_id and :version from the path.
func taskPath(c echo.Context) (string, int64, error) {
	id, err := pathID(c, "task_id")
	if err != nil {
		return "", 0, err
	}
	v, err := pathInt(c, "version")
	return id, v, err
}

func (h *handlers) insertTask(c echo.Context) error {
	var req api.TaskRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if len(req.Payload) > MaxTaskPayloadBytes {
		return &courier.Error{Code: courier.CodeTooLarge, Message: "payload is larger than the limit",
			Details: map[string]any{"field": "payload", "limit_bytes": MaxTaskPayloadBytes}}
	}
	t, outcome, err := h.d.Tasks.Insert(c.Request().Context(), req.Domain())
	if err != nil {
		return err
	}
	out := api.TaskOf(t)
	out.Outcome = outcome
	if outcome == courier.TaskCreated {
		return c.JSON(http.StatusCreated, out)
	}
	return c.JSON(http.StatusOK, out)
}

// listTasks pages through task versions newest first, filtered by queue, status, priority,
// concurrency key and creation time, without payloads and results (GET one version for those).
// The page token is sealed to its query, like a timer list's.
func (h *handlers) listTasks(c echo.Context) error { return answerPage(c, h.taskPage) }

// taskCursor is what a task page token carries (sealed to its query): the last version of the
// page, in the order lists use (courier.TaskKey).
type taskCursor struct {
	CreatedAt time.Time `json:"created_at"`
	TaskID    string    `json:"task_id"`
	Version   int64     `json:"version"`
}

// taskPage reads the page of task versions the request's query asks for: the API's list and the
// console's.
func (h *handlers) taskPage(c echo.Context) (api.TaskPage, error) {
	var f courier.TaskFilter
	var err error
	if f.Queue = c.QueryParam("queue"); f.Queue != "" {
		if err := courier.CheckName("queue", f.Queue); err != nil {
			return api.TaskPage{}, err
		}
	}
	if f.Status = courier.TaskStatus(c.QueryParam("status")); f.Status != "" && !f.Status.Valid() {
		return api.TaskPage{}, &courier.Error{Code: courier.CodeInvalid, Message: fmt.Sprintf("status must be one of %s", taskStatusNames),
			Details: map[string]any{"field": "status"}}
	}
	if f.Priority, err = queryInt(c, "priority", 0, 1, courier.MaxPriority); err != nil {
		return api.TaskPage{}, err
	}
	if f.ConcurrencyKey = c.QueryParam("concurrency_key"); f.ConcurrencyKey != "" {
		if err := courier.CheckID("concurrency_key", f.ConcurrencyKey); err != nil {
			return api.TaskPage{}, err
		}
	}
	if f.CreatedAfter, err = queryTime(c, "created_after"); err != nil {
		return api.TaskPage{}, err
	}
	if f.CreatedBefore, err = queryTime(c, "created_before"); err != nil {
		return api.TaskPage{}, err
	}
	if f.Limit, err = queryLimit(c); err != nil {
		return api.TaskPage{}, err
	}
	query := strings.Join([]string{"tasks", f.Queue, string(f.Status), c.QueryParam("priority"),
		c.QueryParam("created_after"), c.QueryParam("created_before"), f.ConcurrencyKey}, "\x00")
	ctx := c.Request().Context()
	cursor, err := h.pages.open(ctx, query, c.QueryParam("page_token"))
	if err != nil {
		return api.TaskPage{}, err
	}
	if cursor != nil {
		var after taskCursor
		if err := json.Unmarshal(cursor, &after); err != nil {
			return api.TaskPage{}, err // sealed by this gateway fleet: never a client's doing
		}
		f.After = &courier.TaskKey{CreatedAt: after.CreatedAt, TaskID: after.TaskID, Version: after.Version}
	}
	tasks, more, err := h.d.Tasks.List(ctx, f)
	if err != nil {
		return api.TaskPage{}, err
	}
	page := api.TaskPage{Items: make([]api.Task, len(tasks))}
	for i, t := range tasks {
		page.Items[i] = api.TaskOf(t)
	}
	if err := h.markQueuePaused(ctx, page.Items); err != nil {
		return api.TaskPage{}, err
	}
	if more && len(tasks) > 0 {
		last := tasks[len(tasks)-1]
		next, _ := json.Marshal(taskCursor{CreatedAt: last.CreatedAt, TaskID: last.TaskID, Version: last.Version})
		if page.NextPageToken, err = h.pages.seal(ctx, query, next); err != nil {
			return api.TaskPage{}, err
		}
	}
	return page, nil
}

// markQueuePaused sets queue_paused on the pending tasks whose queue is paused: they wait for
// the resume, not for a slot. The pauses are read once, and only when a pending task is shown.
func (h *handlers) markQueuePaused(ctx context.Context, items []api.Task) error {
	var ps *courier.Pauses
	for i := range items {
		if items[i].Status != courier.TaskPending {
			continue
		}
		if ps == nil {
			read, err := h.pauses(ctx)
			if err != nil {
				return err
			}
			ps = &read
		}
		items[i].QueuePaused = api.PausedBy(ps.Queue(items[i].Queue))
	}
	return nil
}

// taskStatusNames lists the statuses for a refusal.
var taskStatusNames = func() string {
	names := make([]string, len(courier.TaskStatuses))
	for i, s := range courier.TaskStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}()

func (h *handlers) getLatestTask(c echo.Context) error {
	return getOne(c, pathID, "task_id", h.d.Tasks.Latest, h.taskShown)
}

func (h *handlers) getTask(c echo.Context) error {
	return answerAt(c, http.StatusOK, taskPath, func(ctx context.Context, id string, v int64) (api.Task, error) {
		t, err := h.d.Tasks.Get(ctx, id, v)
		if err != nil {
			return api.Task{}, err
		}
		return h.taskShown(ctx, t)
	})
}

// taskShown is a task version as the API shows it: a pending one with its queue's pause.
func (h *handlers) taskShown(ctx context.Context, t courier.Task) (api.Task, error) {
	out := []api.Task{api.TaskOf(t)}
	if err := h.markQueuePaused(ctx, out); err != nil {
		return api.Task{}, err
	}
	return out[0], nil
}

func (h *handlers) cancelTask(c echo.Context) error { return answerTask(c, h.d.Tasks.Cancel) }

// retryTask makes a failed or cancelled version pending again with a fresh retry budget, as
// re-submitting it with its own content would (POST /v1/tasks/{id}/versions/{v}/retry).
func (h *handlers) retryTask(c echo.Context) error { return answerTask(c, h.d.Tasks.Retry) }

// answerTask runs do on the task version the path names and answers the version it returns.
func answerTask(c echo.Context, do func(ctx context.Context, taskID string, version int64) (courier.Task, error)) error {
	return answerAt(c, http.StatusOK, taskPath, func(ctx context.Context, id string, v int64) (api.Task, error) {
		t, err := do(ctx, id, v)
		return api.TaskOf(t), err
	})
}

// Bulk task action bounds: those of the outbox's bulk redrive.
const (
	defaultTaskBulkMax = 1000
	maxTaskBulkMax     = 10000
)

// cancelTasks cancels the pending and processing tasks a filter matches (POST
// /v1/tasks/bulk/cancel), each as DELETE /v1/tasks/{id}/versions/{v} does.
func (h *handlers) cancelTasks(c echo.Context) error {
	return bulkTasks(c, h.d.Tasks.CancelMatching, api.NewTaskCancelResult)
}

// retryTasks makes the failed and cancelled tasks a filter matches pending again with a fresh
// retry budget (POST /v1/tasks/bulk/retry), each as re-submitting it would.
func (h *handlers) retryTasks(c echo.Context) error {
	return bulkTasks(c, h.d.Tasks.RetryMatching, api.NewTaskRetryResult)
}

// bulkTasks runs the bulk action do on the tasks the request's filter matches and answers what
// it did as result words it.
func bulkTasks[R any](c echo.Context, do func(ctx context.Context, f courier.TaskFilter, max int) (courier.TaskBulkResult, error),
	result func(done, skipped int, more bool) R) error {
	f, max, err := bindTaskBulk(c)
	if err != nil {
		return err
	}
	res, err := do(c.Request().Context(), f, max)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, result(res.Affected, res.Skipped, res.More))
}

// bindTaskBulk reads and checks a bulk action's filter.
func bindTaskBulk(c echo.Context) (courier.TaskFilter, int, error) {
	var req api.TaskBulkFilter
	if err := bindJSON(c, &req); err != nil {
		return courier.TaskFilter{}, 0, err
	}
	return checkTaskBulk(req)
}

// checkTaskBulk checks a bulk action's filter (the API's and the console's) and returns it
// with its cap; which statuses the action applies to the task service checks.
func checkTaskBulk(req api.TaskBulkFilter) (courier.TaskFilter, int, error) {
	f := req.Filter()
	bad := func(field, msg string) (courier.TaskFilter, int, error) {
		return courier.TaskFilter{}, 0, &courier.Error{Code: courier.CodeValidation, Message: msg, Details: map[string]any{"field": field}}
	}
	if f.Queue != "" {
		if err := courier.CheckName("queue", f.Queue); err != nil {
			return courier.TaskFilter{}, 0, err
		}
	}
	if f.Status != "" && !f.Status.Valid() {
		return bad("status", fmt.Sprintf("status must be one of %s", taskStatusNames))
	}
	if f.ConcurrencyKey != "" {
		if err := courier.CheckID("concurrency_key", f.ConcurrencyKey); err != nil {
			return courier.TaskFilter{}, 0, err
		}
	}
	if f.Priority < 0 || f.Priority > courier.MaxPriority {
		return bad("priority", fmt.Sprintf("priority must be from 1 to %d; got %d", courier.MaxPriority, f.Priority))
	}
	if !f.CreatedAfter.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedAfter.Before(f.CreatedBefore) {
		return bad("created_after", "created_after must be before created_before")
	}
	max := defaultTaskBulkMax
	if req.Max != nil {
		if max = *req.Max; max < 1 || max > maxTaskBulkMax {
			return bad("max", fmt.Sprintf("max must be 1 to %d; got %d", maxTaskBulkMax, max))
		}
	}
	return f, max, nil
}

func (h *handlers) taskResult(c echo.Context) error {
	id, v, req, err := taskRequest[api.TaskResult](c)
	if err != nil {
		return err
	}
	release, err := h.d.Tasks.Report(c.Request().Context(), id, v, req)
	if err != nil {
		return err
	}
	// Accepted: the result is normally in the row already (one whose write failed the
	// attempt's workflow records in a moment; GET shows it). The slot it freed is handed out
	// once this answer is on its way to the worker, not before.
	defer release()
	return answerNow(c, http.StatusAccepted, api.ReportAccepted{TaskID: id, TaskVersion: v, Attempt: req.Attempt, Accepted: true})
}

// taskResults takes many results at once (POST /v1/tasks/results), each recorded and
// answered on its own; the slots they free are handed out once the answer is written.
func (h *handlers) taskResults(c echo.Context) error {
	var req api.TaskResults
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if len(req.Results) == 0 || len(req.Results) > api.MaxTaskResults {
		return &courier.Error{Code: courier.CodeValidation, Details: map[string]any{"field": "results"},
			Message: fmt.Sprintf("results must hold 1 to %d results; got %d", api.MaxTaskResults, len(req.Results))}
	}
	errs, release, err := h.d.Tasks.ReportMany(c.Request().Context(), req.Results)
	if err != nil {
		return err
	}
	defer release()
	out := api.TaskResultsAnswer{Results: make([]api.TaskResultAnswer, len(req.Results))}
	for i, r := range req.Results {
		a := api.TaskResultAnswer{TaskID: r.TaskID, TaskVersion: r.TaskVersion, Attempt: r.Attempt, Status: http.StatusAccepted}
		if errs[i] != nil {
			st, body := render(errs[i])
			a.Status, a.Error = st, &body.Error
		}
		out.Results[i] = a
	}
	return answerNow(c, http.StatusOK, out)
}

// answerNow writes a whole JSON answer, its length declared, and flushes it to the
// connection, so that what the handler does next (a slot's release) happens once the client
// can read all of it.
func answerNow(c echo.Context, code int, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	c.Response().Header().Set(echo.HeaderContentLength, strconv.Itoa(len(b)))
	if err := c.Blob(code, echo.MIMEApplicationJSON, b); err != nil {
		return err
	}
	_ = http.NewResponseController(c.Response().Writer).Flush() // unsupported: written when the handler returns
	return nil
}

func (h *handlers) taskHeartbeat(c echo.Context) error {
	id, v, req, err := taskRequest[api.Heartbeat](c)
	if err != nil {
		return err
	}
	if err := h.d.Tasks.Heartbeat(c.Request().Context(), id, v, req.Attempt, req.Details); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.ReportAccepted{TaskID: id, TaskVersion: v, Attempt: req.Attempt, Accepted: true})
}

func (h *handlers) putQueue(c echo.Context) error {
	var req api.QueueConfig
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	if err := checkSecrets(req.Secrets); err != nil {
		return err
	}
	// Secrets left out (nil) keep the ones stored, in the store's transaction; [] removes them.
	q, err := req.Domain(name)
	if err != nil {
		return err
	}
	out, created, err := h.d.Tasks.PutQueue(c.Request().Context(), q)
	if err != nil {
		return err
	}
	shown, err := h.queueOf(c.Request().Context(), out)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, shown)
	}
	return c.JSON(http.StatusOK, shown)
}

// queueOf shows a queue with its pause, if it is paused.
func (h *handlers) queueOf(ctx context.Context, q courier.Queue) (api.Queue, error) {
	ps, err := h.pauses(ctx)
	if err != nil {
		return api.Queue{}, err
	}
	out := api.QueueOf(q)
	out.Paused = api.PausedBy(ps.Queue(q.Name))
	return out, nil
}

func (h *handlers) getQueue(c echo.Context) error {
	return getOne(c, pathName, "name", h.d.Tasks.GetQueue, h.queueOf)
}

// deleteQueue deletes a queue that has no unfinished tasks (409 while it has).
func (h *handlers) deleteQueue(c echo.Context) error {
	return deleteOne(c, pathName, "name", h.d.Tasks.DeleteQueue)
}

func (h *handlers) listQueues(c echo.Context) error {
	qs, err := h.d.Tasks.ListQueues(c.Request().Context())
	if err != nil {
		return err
	}
	ps, err := h.pauses(c.Request().Context())
	if err != nil {
		return err
	}
	items := make([]api.Queue, len(qs))
	for i, q := range qs {
		items[i] = api.QueueOf(q)
		items[i].Paused = api.PausedBy(ps.Queue(q.Name))
	}
	out, err := keyPage(c, h.pages, "queues", items, func(q api.Queue) string { return q.Name })
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}
