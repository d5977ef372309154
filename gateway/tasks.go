package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
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

// TaskOverridesJSON are per-task settings in the API; durations are Go duration strings.
type TaskOverridesJSON struct {
	PendingTimeout    string `json:"pending_timeout,omitempty"`
	ProcessingTimeout string `json:"processing_timeout,omitempty"`
	HeartbeatTimeout  string `json:"heartbeat_timeout,omitempty"`
	MaxAttempts       int    `json:"max_attempts,omitempty"`
}

// TaskRequestJSON is the body of POST /v1/tasks.
type TaskRequestJSON struct {
	TaskID      string            `json:"task_id"`
	TaskVersion int64             `json:"task_version"`
	Priority    int               `json:"priority"`
	Queue       string            `json:"queue"`
	Payload     json.RawMessage   `json:"payload"`
	Overrides   TaskOverridesJSON `json:"overrides"`
}

// TaskJSON is a task version as the API shows it.
type TaskJSON struct {
	TaskID        string            `json:"task_id"`
	TaskVersion   int64             `json:"task_version"`
	Queue         string            `json:"queue"`
	Priority      int               `json:"priority"`
	Status        string            `json:"status"`
	Outcome       string            `json:"outcome,omitempty"` // insert only: created, replaced, existing
	Payload       json.RawMessage   `json:"payload"`
	Overrides     TaskOverridesJSON `json:"overrides"`
	Attempt       int               `json:"attempt"`  // the current attempt's number (name it in results)
	Attempts      int               `json:"attempts"` // attempts used since the task was (re)submitted
	Result        json.RawMessage   `json:"result,omitempty"`
	StatusCode    int               `json:"status_code,omitempty"`
	Message       string            `json:"message,omitempty"`
	WorkflowID    string            `json:"workflow_id"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
	ExpiresAt     *time.Time        `json:"expires_at,omitempty"`
	ClaimedAt     *time.Time        `json:"claimed_at,omitempty"`
	PushedAt      *time.Time        `json:"pushed_at,omitempty"`
	FinishedAt    *time.Time        `json:"finished_at,omitempty"`
}

func durString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func taskJSON(t courier.Task) TaskJSON {
	out := TaskJSON{
		TaskID: t.TaskID, TaskVersion: t.Version, Queue: t.Queue, Priority: t.Priority, Status: string(t.Status),
		Payload: t.Payload, Attempt: t.Attempt, Attempts: t.Attempts, Result: t.Result, StatusCode: t.StatusCode,
		Message: t.Message, WorkflowID: courier.TaskWorkflowID(t.TaskID, t.Version),
		CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, ClaimedAt: t.ClaimedAt, PushedAt: t.PushedAt, FinishedAt: t.FinishedAt,
		Overrides: TaskOverridesJSON{PendingTimeout: durString(t.Overrides.PendingTimeout),
			ProcessingTimeout: durString(t.Overrides.ProcessingTimeout), HeartbeatTimeout: durString(t.Overrides.HeartbeatTimeout),
			MaxAttempts: t.Overrides.MaxAttempts},
	}
	if t.Status == courier.TaskPending {
		next := t.NextAttemptAt
		out.NextAttemptAt = &next
		out.ExpiresAt = t.ExpiresAt
	}
	return out
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
	var req TaskRequestJSON
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if len(req.Payload) > MaxTaskPayloadBytes {
		return &courier.Error{Code: courier.CodeTooLarge, Message: "payload is larger than the limit",
			Details: map[string]any{"field": "payload", "limit_bytes": MaxTaskPayloadBytes}}
	}
	r := courier.TaskRequest{TaskID: req.TaskID, Version: req.TaskVersion, Priority: req.Priority, Queue: req.Queue,
		Payload: req.Payload, Overrides: courier.TaskOverrides{MaxAttempts: req.Overrides.MaxAttempts}}
	var err error
	if r.Overrides.PendingTimeout, err = parseDur("overrides.pending_timeout", req.Overrides.PendingTimeout); err != nil {
		return err
	}
	if r.Overrides.ProcessingTimeout, err = parseDur("overrides.processing_timeout", req.Overrides.ProcessingTimeout); err != nil {
		return err
	}
	if r.Overrides.HeartbeatTimeout, err = parseDur("overrides.heartbeat_timeout", req.Overrides.HeartbeatTimeout); err != nil {
		return err
	}
	t, outcome, err := h.d.Tasks.Insert(c.Request().Context(), r)
	if err != nil {
		return err
	}
	out := taskJSON(t)
	out.Outcome = string(outcome)
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
	return c.JSON(http.StatusOK, taskJSON(t))
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
	return c.JSON(http.StatusOK, taskJSON(t))
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
	return c.JSON(http.StatusOK, taskJSON(t))
}

// HeartbeatJSON is the body of POST /v1/tasks/{task_id}/versions/{v}/heartbeat.
type HeartbeatJSON struct {
	Attempt int             `json:"attempt"`
	Details json.RawMessage `json:"details,omitempty"`
}

// ReportAccepted answers a result or heartbeat that reached its attempt.
type ReportAccepted struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Accepted    bool   `json:"accepted"`
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
	return c.JSON(http.StatusAccepted, ReportAccepted{TaskID: id, TaskVersion: v, Attempt: req.Attempt, Accepted: true})
}

func (h *handlers) taskHeartbeat(c echo.Context) error {
	id, v, err := taskPath(c, true)
	if err != nil {
		return err
	}
	var req HeartbeatJSON
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if err := h.d.Tasks.Heartbeat(c.Request().Context(), id, v, req.Attempt, req.Details); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ReportAccepted{TaskID: id, TaskVersion: v, Attempt: req.Attempt, Accepted: true})
}

// QueueRequest is the body of PUT /v1/queues/{name}. Omitted fields take their defaults.
type QueueRequest struct {
	PushURL           string    `json:"push_url"`
	Secrets           []string  `json:"secrets"`
	AllowPrivate      bool      `json:"allow_private"`
	ConcurrencyLimit  int       `json:"concurrency_limit"`
	Weights           []int     `json:"weights"`
	PendingTimeout    string    `json:"pending_timeout"`
	ProcessingTimeout string    `json:"processing_timeout"`
	PushTimeout       string    `json:"push_timeout"`
	HeartbeatTimeout  string    `json:"heartbeat_timeout"`
	Retry             RetryJSON `json:"retry"`
	SuccessRetention  string    `json:"success_retention"`
	PurgeAge          string    `json:"purge_age"`
	// Admission control (docs/admission.md); 0: unlimited or unbounded.
	InsertRate  float64 `json:"insert_rate_per_second"`
	InsertBurst int     `json:"insert_burst"`
	MaxPending  int     `json:"max_pending"`
}

// QueueJSON is a queue as the API shows it; secrets are only counted.
type QueueJSON struct {
	Name              string    `json:"name"`
	PushURL           string    `json:"push_url"`
	SecretsCount      int       `json:"secrets_count"`
	AllowPrivate      bool      `json:"allow_private"`
	ConcurrencyLimit  int       `json:"concurrency_limit"`
	InFlight          int       `json:"in_flight"`
	Weights           [5]int    `json:"weights"`
	PendingTimeout    string    `json:"pending_timeout"`
	ProcessingTimeout string    `json:"processing_timeout"`
	PushTimeout       string    `json:"push_timeout"`
	HeartbeatTimeout  string    `json:"heartbeat_timeout"`
	Retry             RetryJSON `json:"retry"`
	SuccessRetention  string    `json:"success_retention"`
	PurgeAge          string    `json:"purge_age"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`

	InsertRate  float64 `json:"insert_rate_per_second"`
	InsertBurst int     `json:"insert_burst"`
	MaxPending  int     `json:"max_pending"`
}

func queueJSON(q courier.Queue) QueueJSON {
	hb := "0s"
	if q.HeartbeatTimeout > 0 {
		hb = q.HeartbeatTimeout.String()
	}
	return QueueJSON{
		Name: q.Name, PushURL: q.PushURL, SecretsCount: len(q.Secrets), AllowPrivate: q.AllowPrivate,
		ConcurrencyLimit: q.ConcurrencyLimit, InFlight: q.InFlight, Weights: q.Weights,
		PendingTimeout: q.PendingTimeout.String(), ProcessingTimeout: q.ProcessingTimeout.String(), PushTimeout: q.PushTimeout.String(), HeartbeatTimeout: hb,
		Retry: RetryJSON{InitialInterval: q.Retry.InitialInterval.String(), Backoff: q.Retry.Backoff,
			MaxInterval: q.Retry.MaxInterval.String(), MaxAttempts: q.Retry.MaxAttempts},
		SuccessRetention: q.SuccessRetention.String(), PurgeAge: q.PurgeAge.String(),
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt,
		InsertRate: q.InsertRate, InsertBurst: q.InsertBurst, MaxPending: q.MaxPending,
	}
}

func (h *handlers) putQueue(c echo.Context) error {
	var req QueueRequest
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
	q := courier.Queue{Name: name, PushURL: req.PushURL, Secrets: req.Secrets, AllowPrivate: req.AllowPrivate,
		ConcurrencyLimit: req.ConcurrencyLimit, Retry: courier.TaskRetry{MaxAttempts: req.Retry.MaxAttempts, Backoff: req.Retry.Backoff},
		InsertRate: req.InsertRate, InsertBurst: req.InsertBurst, MaxPending: req.MaxPending}
	if req.Weights != nil {
		if err := courier.CheckWeights(req.Weights); err != nil {
			return err
		}
		copy(q.Weights[:], req.Weights)
	}
	for _, f := range []struct {
		field string
		raw   string
		dst   *time.Duration
	}{
		{"pending_timeout", req.PendingTimeout, &q.PendingTimeout},
		{"processing_timeout", req.ProcessingTimeout, &q.ProcessingTimeout},
		{"push_timeout", req.PushTimeout, &q.PushTimeout},
		{"heartbeat_timeout", req.HeartbeatTimeout, &q.HeartbeatTimeout},
		{"retry.initial_interval", req.Retry.InitialInterval, &q.Retry.InitialInterval},
		{"retry.max_interval", req.Retry.MaxInterval, &q.Retry.MaxInterval},
		{"success_retention", req.SuccessRetention, &q.SuccessRetention},
		{"purge_age", req.PurgeAge, &q.PurgeAge},
	} {
		if f.field == "heartbeat_timeout" {
			if d, err := time.ParseDuration(f.raw); f.raw == "0" || (err == nil && d == 0) {
				continue // explicitly off
			}
		}
		d, err := parseDur(f.field, f.raw)
		if err != nil {
			return err
		}
		*f.dst = d
	}
	out, created, err := h.d.Tasks.PutQueue(c.Request().Context(), q)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, queueJSON(out))
	}
	return c.JSON(http.StatusOK, queueJSON(out))
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
	return c.JSON(http.StatusOK, queueJSON(q))
}

func (h *handlers) listQueues(c echo.Context) error {
	qs, err := h.d.Tasks.ListQueues(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]QueueJSON, len(qs))
	for i, q := range qs {
		out[i] = queueJSON(q)
	}
	return c.JSON(http.StatusOK, map[string]any{"items": out})
}
