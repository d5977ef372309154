package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// InsertTask applies the version rules in one transaction that holds the task_id's head row:
//   - a version below the highest accepted one → conflict, with current_version;
//   - the same version in processing or success → the existing task, unchanged;
//   - the same version pending with the same content → the existing task, unchanged;
//   - the same version pending (different content), failed, stopped or cancelled → replaced
//     by the request and pending again;
//   - a new version → created; lower versions still pending become superseded.
func (s *Store) InsertTask(ctx context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error) {
	if err := r.Normalize(); err != nil {
		return courier.Task{}, "", err
	}
	overrides, err := encodeOverrides(r.Overrides)
	if err != nil {
		return courier.Task{}, "", err
	}
	var (
		out     courier.Task
		outcome courier.TaskInsertOutcome
	)
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		q, err := s.getQueue(ctx, tx, r.Queue, lockKeep)
		if courier.ErrorCode(err) == courier.CodeNotFound {
			return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("queue %q does not exist", r.Queue),
				Details: map[string]any{"field": "queue"}}
		}
		if err != nil {
			return err
		}
		q = r.Overrides.Apply(q)
		if q.HeartbeatTimeout > q.ProcessingTimeout {
			return &courier.Error{Code: courier.CodeValidation, Message: "heartbeat_timeout must not exceed the processing_timeout",
				Details: map[string]any{"field": "overrides.heartbeat_timeout"}}
		}
		// One statement makes sure the head row exists, locks it (a conflict's update locks the
		// row, and waits for an insert of the same task_id under way) and reads it.
		var head int64
		if err := tx.NewRaw("INSERT INTO courier_task_heads (task_id, max_version) VALUES (?, 0) ON CONFLICT (task_id) "+
			"DO UPDATE SET max_version = courier_task_heads.max_version RETURNING max_version", r.TaskID).Scan(ctx, &head); err != nil {
			return err
		}
		if head == 0 {
			// No version of this task_id was ever accepted (versions start at 1, and a head
			// never goes down): nothing to replace or supersede, the request is created.
			outcome = courier.TaskCreated
			out, err = s.createTask(ctx, tx, q, r, string(overrides))
			return err
		}
		if r.Version < head {
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("task %q already has version %d; version %d is stale", r.TaskID, head, r.Version),
				Details: map[string]any{"current_version": head}}
		}
		var cur taskRow
		sel := tx.NewSelect().Model(&cur).Where("task_id = ? AND version = ?", r.TaskID, r.Version)
		if s.pg {
			// Waits for a claim of this row in flight, so a replace never rewrites a task a
			// claimer has just moved to Processing.
			sel = sel.For("UPDATE")
		}
		err = sel.Scan(ctx)
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		switch {
		case exists && (cur.Status == string(courier.TaskProcessing) || cur.Status == string(courier.TaskSuccess)):
			outcome = courier.TaskExisting
		case exists && cur.Status == string(courier.TaskPending) && cur.Queue == r.Queue && cur.Priority == r.Priority && cur.Key == r.ConcurrencyKey &&
			cur.Overrides == string(overrides) && jsonEqual(cur.Payload, r.Payload):
			outcome = courier.TaskExisting
		case exists:
			// pending with new content, failed, stopped or cancelled: the request replaces it.
			err = s.replaceTask(ctx, tx, q, r, string(overrides))
			outcome = courier.TaskReplaced
		default:
			if r.Version > head {
				if _, err := tx.ExecContext(ctx, "UPDATE courier_task_heads SET max_version = ? WHERE task_id = ?", r.Version, r.TaskID); err != nil {
					return err
				}
				if _, err := tx.NewUpdate().Model((*taskRow)(nil)).
					Set("status = 'superseded'").Set("message = ?", fmt.Sprintf("superseded by version %d", r.Version)).
					Set("finished_at = "+s.nowSQL()).Set("updated_at = "+s.nowSQL()).
					Where("task_id = ? AND version < ? AND status = 'pending'", r.TaskID, r.Version).Exec(ctx); err != nil {
					return err
				}
			}
			_, err = tx.NewRaw("INSERT INTO courier_tasks (task_id, version, queue, priority, concurrency_key, status, payload, overrides, "+
				"traceparent, tracestate, next_attempt_at, expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, "+
				s.nowSQL()+", "+s.nowPlusSQL(q.PendingTimeout)+", "+s.nowSQL()+", "+s.nowSQL()+")",
				r.TaskID, r.Version, r.Queue, r.Priority, r.ConcurrencyKey, string(r.Payload), string(overrides),
				nullString(r.Trace.Parent), nullString(r.Trace.State)).Exec(ctx)
			outcome = courier.TaskCreated
		}
		if err != nil {
			return err
		}
		if outcome != courier.TaskExisting {
			if err := s.admitPending(ctx, tx, q, r.TaskID); err != nil {
				return err
			}
		}
		out, err = s.getTask(ctx, tx, r.TaskID, r.Version, false)
		return err
	})
	if err == nil && outcome != courier.TaskExisting {
		s.notifyCommitted(r.Queue)
	}
	return out, outcome, err
}

// createTask inserts the first version of a task_id (its head row is locked and still 0),
// raises its head, checks the queue's backlog budget and returns the row as written. On
// PostgreSQL the head's update and the insert are one statement.
func (s *Store) createTask(ctx context.Context, tx bun.Tx, q courier.Queue, r courier.TaskRequest, overrides string) (courier.Task, error) {
	with, headArgs := "", []any{}
	if s.pg {
		with, headArgs = "WITH head AS (UPDATE courier_task_heads SET max_version = ? WHERE task_id = ?) ", []any{r.Version, r.TaskID}
	} else if _, err := tx.ExecContext(ctx, "UPDATE courier_task_heads SET max_version = ? WHERE task_id = ?", r.Version, r.TaskID); err != nil {
		return courier.Task{}, err
	}
	var rows []taskRow
	err := tx.NewRaw(with+"INSERT INTO courier_tasks (task_id, version, queue, priority, concurrency_key, status, payload, overrides, "+
		"traceparent, tracestate, next_attempt_at, expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, "+
		s.nowSQL()+", "+s.nowPlusSQL(q.PendingTimeout)+", "+s.nowSQL()+", "+s.nowSQL()+") RETURNING *",
		append(headArgs, r.TaskID, r.Version, r.Queue, r.Priority, r.ConcurrencyKey, string(r.Payload), overrides,
			nullString(r.Trace.Parent), nullString(r.Trace.State))...).Scan(ctx, &rows)
	if err != nil {
		return courier.Task{}, err
	}
	if len(rows) != 1 {
		return courier.Task{}, fmt.Errorf("store: insert of task %q version %d returned %d rows", r.TaskID, r.Version, len(rows))
	}
	if err := s.admitPending(ctx, tx, q, r.TaskID); err != nil {
		return courier.Task{}, err
	}
	return rows[0].task()
}

// replaceTask makes an existing version pending again with r's content: a re-submission's
// replacement and a retry's (RetryTask). q is the task's queue with its overrides applied. The
// attempt number keeps counting, so a late result from an earlier life can never match;
// attempt_base restarts the retry budget.
func (s *Store) replaceTask(ctx context.Context, tx bun.Tx, q courier.Queue, r courier.TaskRequest, overrides string) error {
	_, err := tx.NewUpdate().Model((*taskRow)(nil)).
		Set("queue = ?, priority = ?, payload = ?, overrides = ?, concurrency_key = ?", r.Queue, r.Priority, string(r.Payload), overrides, r.ConcurrencyKey).
		Set("traceparent = ?, tracestate = ?", nullString(r.Trace.Parent), nullString(r.Trace.State)).
		Set("status = 'pending', attempt_base = attempt, result = NULL, status_code = 0, message = ''").
		Set("next_attempt_at = "+s.nowSQL()).Set("expires_at = "+s.nowPlusSQL(q.PendingTimeout)).
		Set("claimed_at = NULL, pushed_at = NULL, deadline_at = NULL, run_id = NULL, heartbeat_timeout_ms = 0, finished_at = NULL").Set("updated_at = "+s.nowSQL()).
		Where("task_id = ? AND version = ?", r.TaskID, r.Version).Exec(ctx)
	return err
}

// RetryTask makes a failed or cancelled version pending again, due now, with a fresh retry
// budget: what re-submitting that version with its own content does (replaceTask, the backlog
// budget, the claimers woken), in one transaction that holds the task id's head row. Only the
// highest version can come back (a lower one is stale, as its re-submission would be): any
// other version, or a status other than failed and cancelled, is a conflict and changes nothing.
func (s *Store) RetryTask(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	var out courier.Task
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var head int64
		err := tx.NewRaw("SELECT max_version FROM courier_task_heads WHERE task_id = ?"+s.forUpdate(), taskID).Scan(ctx, &head)
		if errors.Is(err, sql.ErrNoRows) {
			return courier.Errorf(courier.CodeNotFound, "task %q not found", taskID)
		}
		if err != nil {
			return err
		}
		t, err := s.getTask(ctx, tx, taskID, version, true)
		if err != nil {
			return err
		}
		if version != head {
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("task %q already has version %d; version %d is stale and cannot be retried", taskID, head, version),
				Details: map[string]any{"current_version": head}}
		}
		if t.Status != courier.TaskFailed && t.Status != courier.TaskCancelled {
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("task %q version %d is %s; only failed and cancelled tasks can be retried", taskID, version, t.Status),
				Details: map[string]any{"status": string(t.Status)}}
		}
		q, err := s.getQueue(ctx, tx, t.Queue, lockKeep)
		if err != nil {
			return err
		}
		q = t.Overrides.Apply(q)
		overrides, err := encodeOverrides(t.Overrides)
		if err != nil {
			return err
		}
		r := courier.TaskRequest{TaskID: taskID, Version: version, Priority: t.Priority, Queue: t.Queue,
			Payload: t.Payload, Overrides: t.Overrides, Trace: t.Trace, ConcurrencyKey: t.ConcurrencyKey}
		if err := s.replaceTask(ctx, tx, q, r, string(overrides)); err != nil {
			return err
		}
		if err := s.admitPending(ctx, tx, q, taskID); err != nil {
			return err
		}
		out, err = s.getTask(ctx, tx, taskID, version, false)
		return err
	})
	if err == nil {
		s.notifyCommitted(out.Queue)
	}
	return out, err
}

func jsonEqual(stored string, req json.RawMessage) bool {
	var a, b bytes.Buffer
	if json.Compact(&a, []byte(stored)) != nil || json.Compact(&b, req) != nil {
		return false
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}
