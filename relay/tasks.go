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

// insertTask turns a committed task row into its task. A row is applied once: before the insert
// the row counts an attempt, so a row seen again (the relay died before marking it sent, and its
// lease ran out) whose task version already exists with the row's content is marked sent without
// inserting again; a plain re-insert would otherwise replace a version that had meanwhile failed
// and run it again. A refused insert (stale version, unknown queue, bad request) leaves the row
// dead with the reason; a transient failure leaves it to its lease.
func (r *Relay) insertTask(ctx context.Context, src Source, id int64) {
	fail := func(msg string) {
		if _, err := src.Store.MarkOutboxDead(ctx, id, msg); err != nil {
			r.log.WarnContext(ctx, "marking a task row dead failed", "source", src.Name, "id", id, "error", err)
		}
	}
	if r.tasks == nil {
		fail("tasks are not enabled on this worker")
		return
	}
	rec, err := src.Store.GetOutbox(ctx, id)
	if err != nil {
		return
	}
	ctx, span := traceRow(ctx, src.Name, id, rec.Topic, tracing.FromHeaders(rec.Headers))
	defer span.End()
	req, err := outbox.ParseTaskRow(rec.Payload)
	if err != nil {
		fail(err.Error())
		return
	}
	req.Trace = tracing.FromHeaders(rec.Headers) // the task's attempts join the producer's trace
	if rec.Attempts > 0 {
		if t, err := r.tasks.GetTask(ctx, req.TaskID, req.Version); err == nil && sameTask(t, req) {
			r.markSent(ctx, src, id)
			return
		}
	}
	if err := src.Store.RecordOutboxAttempt(ctx, id, rec.LastError, r.cfg.Lease); err != nil {
		return // the row is applied later, after its lease
	}
	_, outcome, err := r.tasks.InsertTask(ctx, req)
	switch courier.ErrorCode(err) {
	case courier.CodeValidation, courier.CodeConflict, courier.CodeTooLarge, courier.CodeInvalid, courier.CodeNotFound:
		fail(err.Error())
		return
	}
	if err != nil {
		r.log.WarnContext(ctx, "inserting a task failed; retrying after the lease", "source", src.Name, "id", id, "error", err)
		return
	}
	if outcome != courier.TaskExisting {
		r.wakeTasks()
	}
	r.markSent(ctx, src, id)
}

func (r *Relay) markSent(ctx context.Context, src Source, id int64) {
	if _, err := src.Store.MarkOutboxSent(ctx, id); err != nil {
		r.log.WarnContext(ctx, "marking a task row sent failed", "source", src.Name, "id", id, "error", err)
	}
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
