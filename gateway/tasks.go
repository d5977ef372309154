package gateway

import (
	"context"
	"encoding/json"
	"net/http"

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
	Cancel(ctx context.Context, taskID string, version int64) (courier.Task, error)
	Report(ctx context.Context, taskID string, version int64, r courier.TaskResult) error
	Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) error
	PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error)
	GetQueue(ctx context.Context, name string) (courier.Queue, error)
	ListQueues(ctx context.Context) ([]courier.Queue, error)
}

// taskPath reads :task_id and, withVersion, :version from the path.
func taskPath(c echo.Context, withVersion bool) (string, int64, error) {
	id, err := pathID(c, "task_id")
	if err != nil || !withVersion {
		return id, 0, err
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

func (h *handlers) getLatestTask(c echo.Context) error {
	id, _, err := taskPath(c, false)
	if err != nil {
		return err
	}
	t, err := h.d.Tasks.Latest(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.TaskOf(t))
}

func (h *handlers) getTask(c echo.Context) error {
	id, v, err := taskPath(c, true)
	if err != nil {
		return err
	}
	t, err := h.d.Tasks.Get(c.Request().Context(), id, v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.TaskOf(t))
}

func (h *handlers) cancelTask(c echo.Context) error {
	id, v, err := taskPath(c, true)
	if err != nil {
		return err
	}
	t, err := h.d.Tasks.Cancel(c.Request().Context(), id, v)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.TaskOf(t))
}

func (h *handlers) taskResult(c echo.Context) error {
	id, v, err := taskPath(c, true)
	if err != nil {
		return err
	}
	var req courier.TaskResult
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if err := h.d.Tasks.Report(c.Request().Context(), id, v, req); err != nil {
		return err
	}
	// Accepted: a success is normally in the row already; a failure (or a success whose write
	// failed) the attempt's workflow records in a moment (GET shows it).
	return c.JSON(http.StatusAccepted, api.ReportAccepted{TaskID: id, TaskVersion: v, Attempt: req.Attempt, Accepted: true})
}

func (h *handlers) taskHeartbeat(c echo.Context) error {
	id, v, err := taskPath(c, true)
	if err != nil {
		return err
	}
	var req api.Heartbeat
	if err := bindJSON(c, &req); err != nil {
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
	if created {
		return c.JSON(http.StatusCreated, api.QueueOf(out))
	}
	return c.JSON(http.StatusOK, api.QueueOf(out))
}

func (h *handlers) getQueue(c echo.Context) error {
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	q, err := h.d.Tasks.GetQueue(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.QueueOf(q))
}

func (h *handlers) listQueues(c echo.Context) error {
	qs, err := h.d.Tasks.ListQueues(c.Request().Context())
	if err != nil {
		return err
	}
	out := api.List[api.Queue]{Items: make([]api.Queue, len(qs))}
	for i, q := range qs {
		out.Items[i] = api.QueueOf(q)
	}
	return c.JSON(http.StatusOK, out)
}
