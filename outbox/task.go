package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/courier-oss/courier"
)

// TaskTopic is the reserved topic of rows that insert a task instead of publishing a message.
const TaskTopic = "courier.task.insert"

// TaskRow is the payload of a TaskTopic row: the body of POST /v1/tasks, so producers in any
// language can write it (durations as Go duration strings such as "30m").
type TaskRow struct {
	TaskID      string            `json:"task_id"`
	TaskVersion int64             `json:"task_version"`
	Priority    int               `json:"priority,omitempty"` // 1 (high) … 5 (low); default 3
	Queue       string            `json:"queue,omitempty"`    // default "default"
	Payload     json.RawMessage   `json:"payload,omitempty"`  // any JSON; default null
	Overrides   *TaskRowOverrides `json:"overrides,omitempty"`
	// ConcurrencyKey groups tasks for the queue's per-key limit and turns; "" for none.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// TaskRowOverrides replace the queue's settings for one task, as in POST /v1/tasks.
type TaskRowOverrides struct {
	PendingTimeout    string `json:"pending_timeout,omitempty"`
	ProcessingTimeout string `json:"processing_timeout,omitempty"`
	HeartbeatTimeout  string `json:"heartbeat_timeout,omitempty"`
	MaxAttempts       int    `json:"max_attempts,omitempty"`
}

// InsertTask writes a row that makes courier's relay insert the task once tx commits, with the
// version rules of POST /v1/tasks ("save the document and queue its parsing" in one commit).
// The request is checked here as the API checks it (ids, priority, payload size); whether its
// queue exists and its version is current is decided when the relay applies it, and a refused
// insert leaves the row dead with the reason. A redelivered row never inserts twice. r.Trace is
// ignored: the row carries ctx's trace context in its headers, as every outbox row does.
func InsertTask(ctx context.Context, tx Tx, r courier.TaskRequest) (int64, error) {
	if err := r.Normalize(); err != nil {
		return 0, err
	}
	row := TaskRow{TaskID: r.TaskID, TaskVersion: r.Version, Priority: r.Priority, Queue: r.Queue, Payload: r.Payload,
		ConcurrencyKey: r.ConcurrencyKey}
	if o := r.Overrides; o != (courier.TaskOverrides{}) {
		row.Overrides = &TaskRowOverrides{PendingTimeout: durationString(o.PendingTimeout),
			ProcessingTimeout: durationString(o.ProcessingTimeout), HeartbeatTimeout: durationString(o.HeartbeatTimeout),
			MaxAttempts: o.MaxAttempts}
	}
	body, err := json.Marshal(row)
	if err != nil {
		return 0, err
	}
	ids, err := Enqueue(ctx, tx, Message{Topic: TaskTopic, Key: r.TaskID, Payload: body})
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

func durationString(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// ParseTaskRow reads a TaskTopic row's payload back into the request it asks for; unknown
// fields and bad durations are refused as validation errors naming the field. The request is
// not yet normalized (store.InsertTask does that).
func ParseTaskRow(payload []byte) (courier.TaskRequest, error) {
	var row TaskRow
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&row); err != nil {
		return courier.TaskRequest{}, &courier.Error{Code: courier.CodeValidation,
			Message: "task row payload is not a task insert: " + err.Error()}
	}
	r := courier.TaskRequest{TaskID: row.TaskID, Version: row.TaskVersion, Priority: row.Priority, Queue: row.Queue, Payload: row.Payload,
		ConcurrencyKey: row.ConcurrencyKey}
	if o := row.Overrides; o != nil {
		r.Overrides.MaxAttempts = o.MaxAttempts
		for _, d := range []struct {
			field string
			in    string
			out   *time.Duration
		}{
			{"overrides.pending_timeout", o.PendingTimeout, &r.Overrides.PendingTimeout},
			{"overrides.processing_timeout", o.ProcessingTimeout, &r.Overrides.ProcessingTimeout},
			{"overrides.heartbeat_timeout", o.HeartbeatTimeout, &r.Overrides.HeartbeatTimeout},
		} {
			if d.in == "" {
				continue
			}
			v, err := time.ParseDuration(d.in)
			if err != nil || v <= 0 {
				return courier.TaskRequest{}, &courier.Error{Code: courier.CodeValidation,
					Message: fmt.Sprintf("%s must be a positive duration such as \"30m\"", d.field), Details: map[string]any{"field": d.field}}
			}
			*d.out = v
		}
	}
	return r, nil
}
