package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// FinishResult is what finishing an attempt did.
type FinishResult struct {
	Applied bool // this call wrote the outcome (false: the task had moved on, or already held it)
	// Recorded is true when the row holds this outcome afterwards: Applied, or the same success
	// on the same attempt was recorded earlier (by the gateway as it accepted the result, or by
	// this finish before its worker died).
	Recorded      bool
	Status        courier.TaskStatus // the task's status afterwards
	NextAttemptAt time.Time          // for a retry
	Queue         string
	// Of the attempt a finish of many applied (FinishReportedMany): its batch ("" for a run of
	// its own), the run its push recorded (the gateway hands that run the result), when it was
	// pushed and the trace of the task.
	Batch    string
	Run      AttemptRun
	PushedAt *time.Time
	Trace    courier.TraceContext
}

// FinishTaskAttempt ends an attempt, guarded by the expected state (the task in Processing on
// this attempt): success → Success; failure or timeout → Pending again with next_attempt_at
// after the queue's backoff, or Failed once the attempts are spent; cancelled → Cancelled. The
// queue's slot is released in the same transaction. Two writers may finish one attempt with
// the same accepted success (the gateway and the attempt's workflow): the first writes it, the
// second finds it Recorded and changes nothing.
func (s *Store) FinishTaskAttempt(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome) (FinishResult, error) {
	return s.finish(ctx, taskID, version, attempt, o, "")
}

// FinishReported is FinishTaskAttempt for a worker's result that the worker has not yet been
// answered for: the slot the attempt frees stays held under hold, the id of that answer (a
// row of courier_task_slot_holds per answer and queue, still counted in the queue's in_flight),
// until ReleaseSlotHolds(hold) once the answer is written; so a worker that counts a task as
// held until its report is acknowledged never holds more than the queue's limit
// (docs/tasks.md). hold must not be empty.
func (s *Store) FinishReported(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome, hold string) (FinishResult, error) {
	if hold == "" {
		return FinishResult{}, fmt.Errorf("store: FinishReported needs a hold id")
	}
	return s.finish(ctx, taskID, version, attempt, o, hold)
}

// finish is FinishTaskAttempt; a hold keeps the freed slot held under that id (FinishReported).
func (s *Store) finish(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome, hold string) (FinishResult, error) {
	if string(o.Result) == "null" {
		o.Result = nil // no result: stored as NULL, not as the JSON literal
	}
	switch {
	case o.Kind != courier.OutcomeSuccess:
	case s.pg:
		return s.finishSuccess(ctx, taskID, version, attempt, o, hold)
	default:
		// SQLite has one writer: a success its second writer finds recorded is answered from
		// a read, without taking the write lock.
		fr, moved, err := s.movedOn(ctx, taskID, version, attempt)
		if moved || err != nil {
			return fr, err
		}
	}
	return s.finishTx(ctx, taskID, version, attempt, o, hold)
}

// movedOn reads where a task is that a finish of attempt may find moved on: moved is false
// while it is in Processing on that attempt. A purged task has moved on with nothing to say.
func (s *Store) movedOn(ctx context.Context, taskID string, version int64, attempt int) (fr FinishResult, moved bool, err error) {
	t, err := s.GetTask(ctx, taskID, version)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return FinishResult{}, true, nil
	}
	if err != nil {
		return FinishResult{}, false, err
	}
	if t.Status == courier.TaskProcessing && t.Attempt == attempt {
		return FinishResult{}, false, nil
	}
	return FinishResult{Recorded: holdsSuccess(t.Status, t.Attempt, attempt), Status: t.Status, Queue: t.Queue}, true, nil
}

// holdsSuccess says whether a row in status on rowAttempt holds the success of attempt: the
// outcome a second writer of that success finds recorded.
func holdsSuccess(status courier.TaskStatus, rowAttempt, attempt int) bool {
	return rowAttempt == attempt && status == courier.TaskSuccess
}

// finishSuccess records a success in one autocommitted statement (PostgreSQL): the guarded
// update of the task and the slot's release together, so the queue's limiter row is locked
// only through this statement's commit (or, with hold, the slot's hold, which leaves the
// limiter row alone); a released slot's claimers are notified after the commit. The same statement reads
// the row as it was before, which says where a task that was not in Processing on this
// attempt is; only when another writer changed it meanwhile is it read again.
func (s *Store) finishSuccess(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome, hold string) (FinishResult, error) {
	var result any
	if len(o.Result) > 0 {
		result = string(o.Result)
	}
	free := "released AS (UPDATE courier_task_queues SET in_flight = in_flight - 1 FROM done WHERE name = done.queue RETURNING name) "
	args := []any{result, o.StatusCode, o.Message, taskID, version, attempt}
	if hold != "" {
		free = "released AS (INSERT INTO courier_task_slot_holds (hold_id, queue, slots) SELECT ?, done.queue, 1 FROM done " +
			"ON CONFLICT (hold_id, queue) DO UPDATE SET slots = courier_task_slot_holds.slots + 1 RETURNING queue) "
		args = append(args, hold)
	}
	var rows []struct {
		Status  string `bun:"status"`
		Attempt int    `bun:"attempt"`
		Queue   string `bun:"queue"`
		Applied bool   `bun:"applied"`
	}
	err := s.db.NewRaw("WITH done AS (UPDATE courier_tasks SET status = 'success', result = ?, status_code = ?, message = ?, "+
		"finished_at = clock_timestamp(), updated_at = clock_timestamp(), timeout_at = NULL "+
		"WHERE task_id = ? AND version = ? AND attempt = ? AND status = 'processing' RETURNING queue), "+free+
		"SELECT t.status, t.attempt, t.queue, EXISTS (SELECT 1 FROM released) AS applied FROM courier_tasks t WHERE t.task_id = ? AND t.version = ?",
		append(args, taskID, version)...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return FinishResult{}, err
	}
	if len(rows) == 0 {
		return FinishResult{}, nil // purged meanwhile: nothing to finish
	}
	r := rows[0]
	if r.Applied {
		if hold == "" {
			s.notifyCommitted(r.Queue) // the slot is free now
		}
		return FinishResult{Applied: true, Recorded: true, Status: courier.TaskSuccess, Queue: r.Queue}, nil
	}
	status := courier.TaskStatus(r.Status)
	if status == courier.TaskProcessing && r.Attempt == attempt {
		// Not updated, yet in Processing on this attempt as the statement began: another
		// writer finished it meanwhile. Read what it wrote; the attempt never comes back.
		fr, moved, err := s.movedOn(ctx, taskID, version, attempt)
		if err == nil && !moved {
			err = fmt.Errorf("store: task %q version %d attempt %d was neither finished nor moved on; try again", taskID, version, attempt)
		}
		return fr, err
	}
	return FinishResult{Recorded: holdsSuccess(status, r.Attempt, attempt), Status: status, Queue: r.Queue}, nil
}

// finishTx is FinishTaskAttempt in a transaction that reads the task first under its lock.
func (s *Store) finishTx(ctx context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome, hold string) (FinishResult, error) {
	var fr FinishResult
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		t, err := s.getTask(ctx, tx, taskID, version, true)
		if courier.ErrorCode(err) == courier.CodeNotFound {
			fr = FinishResult{}
			return nil // purged meanwhile: nothing to finish
		}
		if err != nil {
			return err
		}
		fr, err = s.finishLocked(ctx, tx, t, attempt, o, hold, nil)
		return err
	})
	return fr, err
}

// finishLocked ends attempt of t, a task read under its lock in tx: guarded by t being in
// Processing on that attempt, its slot released (or held under hold) in tx. queues, if not nil,
// caches the queues' settings a failure's retry policy reads, across the calls of one
// transaction.
func (s *Store) finishLocked(ctx context.Context, tx bun.Tx, t courier.Task, attempt int, o contract.AttemptOutcome, hold string,
	queues map[string]courier.Queue) (FinishResult, error) {
	fr := FinishResult{Status: t.Status, Queue: t.Queue}
	if o.Kind == courier.OutcomeSuccess && holdsSuccess(t.Status, t.Attempt, attempt) {
		fr.Recorded = true // the same accepted success, recorded first by another writer
		return fr, nil
	}
	if t.Status != courier.TaskProcessing || t.Attempt != attempt {
		return fr, nil
	}
	var result any
	if len(o.Result) > 0 && string(o.Result) != "null" {
		result = string(o.Result)
	}
	upd := tx.NewUpdate().Model((*taskRow)(nil)).Set("status_code = ?, message = ?", o.StatusCode, o.Message).
		Set("timeout_at = NULL").Set("updated_at = "+s.nowSQL()).Where("task_id = ? AND version = ?", t.TaskID, t.Version)
	switch o.Kind {
	case courier.OutcomeSuccess:
		fr.Status = courier.TaskSuccess
		upd = upd.Set("status = 'success', result = ?", result).Set("finished_at = " + s.nowSQL())
	case courier.OutcomeCancelled:
		fr.Status = courier.TaskCancelled
		upd = upd.Set("status = 'cancelled'").Set("finished_at = " + s.nowSQL())
	case courier.OutcomeFailure, courier.OutcomeTimeout:
		q, ok := queues[t.Queue]
		if !ok {
			var err error
			if q, err = s.getQueue(ctx, tx, t.Queue, lockNone); err != nil { // its retry policy, read only when needed
				return fr, err
			}
			if queues != nil {
				queues[t.Queue] = q
			}
		}
		q = t.Overrides.Apply(q)
		used := t.Attempts
		if used < q.Retry.MaxAttempts {
			delay := q.Retry.Delay(used)
			fr.Status = courier.TaskPending
			upd = upd.Set("status = 'pending', result = ?", result).Set("next_attempt_at = " + s.nowPlusSQL(delay)).
				Set("expires_at = " + s.nowPlusSQL(delay+q.PendingTimeout))
		} else {
			fr.Status = courier.TaskFailed
			upd = upd.Set("status = 'failed', result = ?", result).Set("finished_at = " + s.nowSQL())
		}
	default:
		return fr, fmt.Errorf("store: unknown attempt outcome %q", o.Kind)
	}
	if _, err := upd.Exec(ctx); err != nil {
		return fr, err
	}
	var err error
	if hold != "" {
		err = s.holdSlots(ctx, tx, hold, t.Queue, 1)
	} else {
		err = s.releaseSlot(ctx, tx, t.Queue)
	}
	if err != nil {
		return fr, err
	}
	fr.Applied, fr.Recorded = true, true
	fr.Batch, fr.Run, fr.PushedAt, fr.Trace = t.Batch, AttemptRun{ID: t.RunID, HeartbeatTimeout: t.AttemptHeartbeatTimeout}, t.PushedAt, t.Trace
	if fr.Status == courier.TaskPending {
		var next taskRow
		if err := tx.NewSelect().Model(&next).Column("next_attempt_at").Where("task_id = ? AND version = ?", t.TaskID, t.Version).Scan(ctx); err != nil {
			return fr, err
		}
		fr.NextAttemptAt = next.NextAttemptAt.UTC()
	}
	return fr, nil
}

// CancelTask cancels a task version: Pending → Cancelled at once; Processing → Cancelled with
// its slot released in the same transaction (the caller then cancels the attempt's workflow).
// Cancelling a cancelled task returns it unchanged; other statuses are a conflict.
func (s *Store) CancelTask(ctx context.Context, taskID string, version int64) (courier.Task, bool, error) {
	var (
		out           courier.Task
		wasProcessing bool
	)
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		t, err := s.getTask(ctx, tx, taskID, version, true)
		if err != nil {
			return err
		}
		switch t.Status {
		case courier.TaskCancelled:
			out = t
			return nil
		case courier.TaskPending, courier.TaskProcessing:
		default:
			return &courier.Error{Code: courier.CodeConflict, Message: fmt.Sprintf("task %q version %d is %s and can no longer be cancelled", taskID, version, t.Status),
				Details: map[string]any{"status": string(t.Status)}}
		}
		wasProcessing = t.Status == courier.TaskProcessing
		if _, err := tx.NewUpdate().Model((*taskRow)(nil)).Set("status = 'cancelled', message = 'cancelled through the API', timeout_at = NULL").
			Set("finished_at = "+s.nowSQL()).Set("updated_at = "+s.nowSQL()).
			Where("task_id = ? AND version = ?", taskID, version).Exec(ctx); err != nil {
			return err
		}
		if wasProcessing {
			if err := s.releaseSlot(ctx, tx, t.Queue); err != nil {
				return err
			}
		}
		out, err = s.getTask(ctx, tx, taskID, version, false)
		return err
	})
	return out, wasProcessing, err
}

// holdSlots keeps n slots of a queue that workers' results free held under the answer's hold
// id after their tasks leave Processing, until ReleaseSlotHolds (FinishReported).
func (s *Store) holdSlots(ctx context.Context, tx bun.Tx, hold, queue string, n int) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO courier_task_slot_holds (hold_id, queue, slots) VALUES (?, ?, ?) "+
		"ON CONFLICT (hold_id, queue) DO UPDATE SET slots = courier_task_slot_holds.slots + excluded.slots", hold, queue, n)
	return err
}

// releaseSlot gives back the Processing slot a task held on its queue's limiter and wakes the
// claimers (at commit) to take it. Every path that moves a task out of Processing calls it (or
// holdSlots) in the transaction that changes the task's status, so in_flight always counts the
// rows in Processing and the held slots.
func (s *Store) releaseSlot(ctx context.Context, tx bun.Tx, queue string) error {
	const release = "UPDATE courier_task_queues SET in_flight = in_flight - 1 WHERE name = ?"
	if s.pg {
		// The notification in the same statement: the row stays locked until the commit, so a
		// round trip less is that much less waiting for the queue's other finishes and claims.
		_, err := tx.ExecContext(ctx, release+" RETURNING pg_notify('courier_tasks', name)", queue)
		return err
	}
	_, err := tx.ExecContext(ctx, release, queue)
	return err
}
