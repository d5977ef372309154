package store

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// FinishResult is what finishing an attempt did.
type FinishResult struct {
	Applied       bool               // false: the task had moved on (stale attempt); nothing changed
	Status        courier.TaskStatus // the task's status afterwards
	NextAttemptAt time.Time          // for a retry
	Queue         string
}

// FinishTaskAttempt ends an attempt in one transaction, guarded by the expected state (the
// task in Processing on this attempt): success → Success; failure or timeout → Pending again
// with next_attempt_at after the queue's backoff, or Failed once the attempts are spent;
// cancelled → Cancelled. The queue's slot is released in the same transaction.
func (s *Store) FinishTaskAttempt(ctx context.Context, taskID string, version int64, attempt int, o courier.AttemptOutcome) (FinishResult, error) {
	var fr FinishResult
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		fr = FinishResult{}
		t, err := s.getTask(ctx, tx, taskID, version, true)
		if courier.ErrorCode(err) == courier.CodeNotFound {
			return nil // purged meanwhile: nothing to finish
		}
		if err != nil {
			return err
		}
		fr.Status, fr.Queue = t.Status, t.Queue
		if t.Status != courier.TaskProcessing || t.Attempt != attempt {
			return nil
		}
		var result any
		if len(o.Result) > 0 {
			result = string(o.Result)
		}
		upd := tx.NewUpdate().Model((*taskRow)(nil)).Set("status_code = ?, message = ?", o.StatusCode, o.Message).
			Set("updated_at = "+s.nowSQL()).Where("task_id = ? AND version = ?", taskID, version)
		switch o.Kind {
		case courier.OutcomeSuccess:
			fr.Status = courier.TaskSuccess
			upd = upd.Set("status = 'success', result = ?", result).Set("finished_at = " + s.nowSQL())
		case courier.OutcomeCancelled:
			fr.Status = courier.TaskCancelled
			upd = upd.Set("status = 'cancelled'").Set("finished_at = " + s.nowSQL())
		case courier.OutcomeFailure, courier.OutcomeTimeout:
			q, err := s.getQueue(ctx, tx, t.Queue, false) // its retry policy, read only when needed
			if err != nil {
				return err
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
			return fmt.Errorf("store: unknown attempt outcome %q", o.Kind)
		}
		if _, err := upd.Exec(ctx); err != nil {
			return err
		}
		if err := s.releaseSlot(ctx, tx, t.Queue); err != nil {
			return err
		}
		fr.Applied = true
		if fr.Status == courier.TaskPending {
			var next taskRow
			if err := tx.NewSelect().Model(&next).Column("next_attempt_at").Where("task_id = ? AND version = ?", taskID, version).Scan(ctx); err != nil {
				return err
			}
			fr.NextAttemptAt = next.NextAttemptAt.UTC()
		}
		return nil
	})
	return fr, err
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
		if _, err := tx.NewUpdate().Model((*taskRow)(nil)).Set("status = 'cancelled', message = 'cancelled through the API'").
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

// releaseSlot gives back the Processing slot a task held on its queue's limiter and wakes the
// claimers (at commit) to take it. Every path that moves a task out of Processing calls it in
// the transaction that changes the task's status, so in_flight always counts the rows in
// Processing.
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
