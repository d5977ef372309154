package relay

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/tracing"
)

// TaskInserter inserts tasks for rows on outbox.TaskTopic with the version rules (courier's
// store). It is declared here, where it is used.
type TaskInserter interface {
	InsertTask(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error)
	GetTask(ctx context.Context, taskID string, version int64) (courier.Task, error)
}

// taskRows insert the tasks of rows on outbox.TaskTopic. A refused insert (stale version,
// unknown queue, bad request) leaves the row dead.
var taskRows = rowKind{name: "task", verb: "inserting a task",
	enabled: func(r *Relay) bool { return r.tasks != nil },
	refused: []courier.Code{courier.CodeValidation, courier.CodeConflict, courier.CodeTooLarge, courier.CodeInvalid, courier.CodeNotFound},
	apply:   (*Relay).insertTask}

// insertTask turns a task row into its task. A row is applied once: before the insert the row
// counts an attempt, so a row seen again (the relay died before marking it sent, and its lease
// ran out) whose task version already exists with the row's content is marked sent without
// inserting again; a plain re-insert would otherwise replace a version that had meanwhile
// failed and run it again.
func (r *Relay) insertTask(ctx context.Context, src Source, rec courier.OutboxRecord) error {
	req, err := outbox.ParseTaskRow(rec.Payload)
	if err != nil {
		return badRow{err.Error()}
	}
	req.Trace = tracing.FromHeaders(rec.Headers) // the task's attempts join the producer's trace
	if rec.Attempts > 0 {
		if t, err := r.tasks.GetTask(ctx, req.TaskID, req.Version); err == nil && sameTask(t, req) {
			return nil
		}
	}
	if err := src.Store.RecordOutboxAttempt(ctx, rec.ID, rec.LastError, r.cfg.Lease); err != nil {
		return errRowLater
	}
	_, outcome, err := r.tasks.InsertTask(ctx, req)
	if err == nil && outcome != courier.TaskExisting {
		r.wakeTasks()
	}
	return err
}

// sameTask reports whether a stored version has the content the request asks for (its queue,
// priority, payload and overrides).
func sameTask(t courier.Task, r courier.TaskRequest) bool {
	if err := r.Normalize(); err != nil {
		return false
	}
	return t.Queue == r.Queue && t.Priority == r.Priority && t.Overrides == r.Overrides && sameJSON(t.Payload, r.Payload)
}

func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}
