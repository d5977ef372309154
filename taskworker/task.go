package taskworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// Push is the JSON body courier POSTs to a queue's push_url. Tests of a handler can build one.
type Push = api.TaskPush

// Task is one attempt of a task version, as courier pushed it. The handler's context carries
// it too (FromContext).
type Task struct {
	ID               string
	Version          int64
	Attempt          int // courier accepts reports for this attempt only; the Worker names it
	Priority         int // 1 (high) to 5 (low)
	Queue            string
	Payload          json.RawMessage
	Deadline         time.Time     // the attempt's processing timeout runs out; the handler's context ends here
	HeartbeatTimeout time.Duration // 0: the queue wants no heartbeats (the Worker then sends none)
	DeliveryID       string        // the attempt's delivery id (task/<id>/<version>/<attempt>): a single push's webhook-id, a batched push's delivery_id; "" if neither
	ResultURL        string        // where the result goes, as the push named it (informational)
	HeartbeatURL     string        // where heartbeats go, as the push named it (informational)
	// ResultsURL is set when the queue takes results in batches (the batched dispatch mode):
	// the Worker then reports this attempt's result with others in one POST /v1/tasks/results
	// through Config.Client (never to the URL the push names).
	ResultsURL string
	// Traceparent and Tracestate are the push's W3C trace context: the handler's context
	// carries it as the remote parent, so spans the handler starts (and the result call, with
	// an OpenTelemetry-instrumented http.Client) join the task's trace.
	Traceparent, Tracestate string

	mu      sync.Mutex
	message string
}

// SetMessage sets the message reported with a successful result (a failure's message is its
// error's text). At most 4 KiB is sent.
func (t *Task) SetMessage(msg string) {
	t.mu.Lock()
	t.message = msg
	t.mu.Unlock()
}

// Message is the message SetMessage set.
func (t *Task) Message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.message
}

type taskKey struct{}

// FromContext returns the task whose handler ctx belongs to.
func FromContext(ctx context.Context) (*Task, bool) {
	t, ok := ctx.Value(taskKey{}).(*Task)
	return t, ok
}

// HandlerFunc does one attempt's work. Its result is reported as a success (it must be JSON; nil
// is fine); an error is reported as a failure with the error's text (Fail chooses the status
// code), and courier retries per the queue's policy. ctx ends at the attempt's deadline, when
// courier says the attempt is over (a 409 on a heartbeat: timed out, cancelled, superseded), or
// when Shutdown gives up waiting; context.Cause(ctx) says which (ErrDeadline, ErrAttemptOver,
// ErrSuperseded, ErrShutdown). Nothing is reported after the first three, since courier would
// refuse it.
type HandlerFunc func(ctx context.Context, t *Task) (json.RawMessage, error)

// Why a handler's context ends early (context.Cause).
var (
	ErrDeadline    = errors.New("taskworker: the attempt's deadline passed")
	ErrAttemptOver = errors.New("taskworker: courier says the attempt is over (timed out, cancelled, superseded or finished)")
	ErrSuperseded  = errors.New("taskworker: a newer attempt of this task version was pushed")
	ErrShutdown    = errors.New("taskworker: the worker is shutting down")
)

// Failure is a handler error that carries the status code reported with the failure.
type Failure struct {
	StatusCode int // 0 to 999, kept on the task as status_code
	Err        error
}

func (f *Failure) Error() string { return f.Err.Error() }

func (f *Failure) Unwrap() error { return f.Err }

// Fail makes err a failure reported with statusCode (a handler error without it is reported
// with 500).
func Fail(statusCode int, err error) error { return &Failure{StatusCode: statusCode, Err: err} }

// decodePush reads and checks a push body.
func decodePush(body []byte) (*Task, error) {
	var p Push
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("not a task push: %v", err)
	}
	return taskOf(p)
}

// taskOf checks a push and makes it a task.
func taskOf(p Push) (*Task, error) {
	if err := courier.CheckID("task_id", p.TaskID); err != nil {
		return nil, err
	}
	switch {
	case p.TaskVersion < 1:
		return nil, errors.New("task_version must be at least 1")
	case p.Attempt < 1:
		return nil, errors.New("attempt must be at least 1")
	case p.Deadline.IsZero():
		return nil, errors.New("deadline is required")
	}
	hb := p.HeartbeatTimeout.Std()
	return &Task{ID: p.TaskID, Version: p.TaskVersion, Attempt: p.Attempt, Priority: p.Priority, Queue: p.Queue,
		Payload: p.Payload, Deadline: p.Deadline, HeartbeatTimeout: hb, ResultURL: p.ResultURL, HeartbeatURL: p.HeartbeatURL,
		ResultsURL: p.ResultsURL, DeliveryID: p.DeliveryID}, nil
}
