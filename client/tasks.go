package client

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/courier-oss/courier"
)

// TaskOverrides replace the queue's settings for one task. Zero fields keep the queue's.
type TaskOverrides struct {
	PendingTimeout    Duration `json:"pending_timeout,omitzero"`
	ProcessingTimeout Duration `json:"processing_timeout,omitzero"`
	HeartbeatTimeout  Duration `json:"heartbeat_timeout,omitzero"`
	MaxAttempts       int      `json:"max_attempts,omitempty"`
}

// TaskRequest inserts a task version (POST /v1/tasks, scope producer). The same version again
// returns the stored task (or replaces one that is pending with other content, failed, stopped
// or cancelled), so an insert is retried safely; a version below the highest known is
// ErrConflict with details.current_version.
type TaskRequest struct {
	TaskID      string          `json:"task_id"`
	TaskVersion int64           `json:"task_version"`       // at least 1
	Priority    int             `json:"priority,omitempty"` // 1 (high) to 5 (low); 0: 3
	Queue       string          `json:"queue,omitempty"`    // "": default
	Payload     json.RawMessage `json:"payload,omitempty"`  // any JSON, at most 512 KiB; pushed to the worker as it is
	Overrides   TaskOverrides   `json:"overrides,omitzero"`
}

// Task is a task version as the API shows it.
type Task struct {
	TaskID        string                    `json:"task_id"`
	TaskVersion   int64                     `json:"task_version"`
	Queue         string                    `json:"queue"`
	Priority      int                       `json:"priority"`
	Status        courier.TaskStatus        `json:"status"`
	Outcome       courier.TaskInsertOutcome `json:"outcome,omitempty"` // InsertTask only: created, replaced, existing
	Payload       json.RawMessage           `json:"payload"`
	Overrides     TaskOverrides             `json:"overrides"`
	Attempt       int                       `json:"attempt"`  // the current attempt's number (name it in results)
	Attempts      int                       `json:"attempts"` // attempts used since the task was (re)submitted
	Result        json.RawMessage           `json:"result,omitempty"`
	StatusCode    int                       `json:"status_code,omitempty"`
	Message       string                    `json:"message,omitempty"`
	WorkflowID    string                    `json:"workflow_id"`
	CreatedAt     time.Time                 `json:"created_at"`
	UpdatedAt     time.Time                 `json:"updated_at"`
	NextAttemptAt *time.Time                `json:"next_attempt_at,omitempty"`
	ExpiresAt     *time.Time                `json:"expires_at,omitempty"`
	ClaimedAt     *time.Time                `json:"claimed_at,omitempty"`
	PushedAt      *time.Time                `json:"pushed_at,omitempty"`
	FinishedAt    *time.Time                `json:"finished_at,omitempty"`
}

// ReportAccepted answers a result or heartbeat that reached its attempt.
type ReportAccepted struct {
	TaskID      string `json:"task_id"`
	TaskVersion int64  `json:"task_version"`
	Attempt     int    `json:"attempt"`
	Accepted    bool   `json:"accepted"`
}

func taskVersionPath(taskID string, version int64) string {
	return "/v1/tasks/" + seg(taskID) + "/versions/" + strconv.FormatInt(version, 10)
}

// InsertTask inserts a task version; Task.Outcome says what the insert did.
func (c *Client) InsertTask(ctx context.Context, r TaskRequest) (*Task, error) {
	var out Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tasks", body: r, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTask reads the latest stored version of a task.
func (c *Client) GetTask(ctx context.Context, taskID string) (*Task, error) {
	var out Task
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tasks/" + seg(taskID), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTaskVersion reads one version of a task.
func (c *Client) GetTaskVersion(ctx context.Context, taskID string, version int64) (*Task, error) {
	var out Task
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskVersionPath(taskID, version), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelTask cancels a pending or processing task version (a cancelled one is returned as it
// is; a finished one is ErrConflict).
func (c *Client) CancelTask(ctx context.Context, taskID string, version int64) (*Task, error) {
	var out Task
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: taskVersionPath(taskID, version), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReportResult reports how an attempt ended (scope worker): Accepted when r.Attempt is the
// attempt running; ErrConflict when it is not (it timed out, was cancelled, superseded, or
// already has its outcome), and then nothing changed. Not retried on 503 or a lost answer: a
// repeat of an accepted result is ErrConflict (the taskworker package retries it and reads that
// 409 as "over").
func (c *Client) ReportResult(ctx context.Context, taskID string, version int64, r courier.TaskResult) (*ReportAccepted, error) {
	var out ReportAccepted
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskVersionPath(taskID, version) + "/result", body: r, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// heartbeatBody is the body of a heartbeat.
type heartbeatBody struct {
	Attempt int             `json:"attempt"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Heartbeat tells courier that attempt is alive (scope worker), extending its heartbeat
// timeout; details (optional JSON) is recorded with it. ErrConflict means the attempt is over:
// stop working on it.
func (c *Client) Heartbeat(ctx context.Context, taskID string, version int64, attempt int, details json.RawMessage) (*ReportAccepted, error) {
	var out ReportAccepted
	_, err := c.do(ctx, call{method: http.MethodPost, path: taskVersionPath(taskID, version) + "/heartbeat",
		body: heartbeatBody{Attempt: attempt, Details: details}, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// QueueConfig is a queue's configuration (PUT /v1/queues/{name}, scope admin). A PUT replaces
// the whole configuration; zero fields take their defaults (docs/tasks.md), except Secrets: nil
// keeps the stored ones, an empty non-nil slice removes them.
type QueueConfig struct {
	PushURL           string   `json:"push_url,omitempty"`
	Secrets           []string `json:"secrets,omitzero"` // whsec_… push-signing secrets; two during a rotation
	AllowPrivate      bool     `json:"allow_private,omitempty"`
	ConcurrencyLimit  int      `json:"concurrency_limit,omitempty"`
	Weights           []int    `json:"weights,omitempty"` // five weights, priorities 1–5
	PendingTimeout    Duration `json:"pending_timeout,omitzero"`
	ProcessingTimeout Duration `json:"processing_timeout,omitzero"`
	PushTimeout       Duration `json:"push_timeout,omitzero"`
	HeartbeatTimeout  Duration `json:"heartbeat_timeout,omitzero"` // zero: off
	Retry             Retry    `json:"retry,omitzero"`
	SuccessRetention  Duration `json:"success_retention,omitzero"`
	PurgeAge          Duration `json:"purge_age,omitzero"`
	InsertRate        float64  `json:"insert_rate_per_second,omitempty"` // admission control; 0: unlimited
	InsertBurst       int      `json:"insert_burst,omitempty"`
	MaxPending        int      `json:"max_pending,omitempty"` // 0: unbounded backlog
}

// Queue is a queue as the API shows it; secrets are only counted.
type Queue struct {
	Name              string    `json:"name"`
	PushURL           string    `json:"push_url"`
	SecretsCount      int       `json:"secrets_count"`
	AllowPrivate      bool      `json:"allow_private"`
	ConcurrencyLimit  int       `json:"concurrency_limit"`
	InFlight          int       `json:"in_flight"`
	Weights           [5]int    `json:"weights"`
	PendingTimeout    Duration  `json:"pending_timeout"`
	ProcessingTimeout Duration  `json:"processing_timeout"`
	PushTimeout       Duration  `json:"push_timeout"`
	HeartbeatTimeout  Duration  `json:"heartbeat_timeout"`
	Retry             Retry     `json:"retry"`
	SuccessRetention  Duration  `json:"success_retention"`
	PurgeAge          Duration  `json:"purge_age"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
	InsertRate        float64   `json:"insert_rate_per_second"`
	InsertBurst       int       `json:"insert_burst"`
	MaxPending        int       `json:"max_pending"`

	Created bool `json:"-"` // PutQueue: the call created it (201) rather than replaced it
}

// PutQueue creates or replaces a queue (scope admin).
func (c *Client) PutQueue(ctx context.Context, name string, cfg QueueConfig) (*Queue, error) {
	var out Queue
	st, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/queues/" + seg(name), body: cfg, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return &out, nil
}

// GetQueue reads one queue (scope admin).
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	var out Queue
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/queues/" + seg(name), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListQueues reads every queue (scope admin).
func (c *Client) ListQueues(ctx context.Context) ([]Queue, error) {
	var out struct {
		Items []Queue `json:"items"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/queues", idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return out.Items, nil
}
