package store

import (
	"context"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier/dispatch"
)

// The sweeper's bulk statements pick rows in a subquery (locked with SKIP LOCKED on PostgreSQL)
// and repeat the status condition outside it: on PostgreSQL a row another transaction changed
// meanwhile is re-checked only against the outer WHERE.

// ExpirePendingTasks fails up to limit pending tasks past their pending timeout.
func (s *Store) ExpirePendingTasks(ctx context.Context, limit int) (int64, error) {
	cond := "status = 'pending' AND expires_at < " + s.nowSQL()
	with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE " + cond + " LIMIT ?")
	res, err := s.db.ExecContext(ctx, with+"UPDATE courier_tasks SET status = 'failed', message = 'pending timeout: no slot before the deadline', "+
		"finished_at = "+s.nowSQL()+", updated_at = "+s.nowSQL()+" WHERE "+in+" AND "+cond, limit)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// StopSucceededTasks moves up to limit of a queue's successes older than retention to Stopped.
func (s *Store) StopSucceededTasks(ctx context.Context, queue string, retention time.Duration, limit int) (int64, error) {
	cond := "queue = ? AND status = 'success' AND finished_at < " + s.nowPlusSQL(-retention)
	with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE " + cond + " LIMIT ?")
	res, err := s.db.ExecContext(ctx, with+"UPDATE courier_tasks SET status = 'stopped', updated_at = "+s.nowSQL()+" WHERE "+in+" AND "+cond,
		queue, limit, queue)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// PurgeTasks deletes up to limit of a queue's failed, stopped, superseded and cancelled rows
// whose last change is older than age, except the row of each task id's highest version: that
// one stays (its payload and result cleared), so its status remains readable and a repeat of
// that version replaces it with the attempt numbers still counting up. It returns the rows
// deleted or cleared.
func (s *Store) PurgeTasks(ctx context.Context, queue string, age time.Duration, limit int) (int64, error) {
	old := "queue = ? AND status IN ('failed', 'stopped', 'superseded', 'cancelled') AND updated_at < " + s.nowPlusSQL(-age)
	head := "(SELECT h.max_version FROM courier_task_heads h WHERE h.task_id = courier_tasks.task_id)"
	cond := old + " AND version < " + head
	with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE " + cond + " LIMIT ?")
	res, err := s.db.ExecContext(ctx, with+"DELETE FROM courier_tasks WHERE "+in+" AND "+cond, queue, limit, queue)
	if err != nil {
		return 0, err
	}
	deleted, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	cond = old + " AND version = " + head + " AND (payload <> 'null' OR result IS NOT NULL)"
	with, in = s.picked("SELECT task_id, version FROM courier_tasks WHERE " + cond + " LIMIT ?")
	res, err = s.db.ExecContext(ctx, with+"UPDATE courier_tasks SET payload = 'null', result = NULL WHERE "+in+" AND "+cond, queue, limit, queue)
	if err != nil {
		return deleted, err
	}
	cleared, err := res.RowsAffected()
	return deleted + cleared, err
}

// OverdueTasks returns up to limit tasks in Processing whose processing deadline passed more
// than grace ago, most overdue first: Temporal should have ended their attempt by then, so the
// sweeper checks that their workflow still runs (an operator may have terminated it).
func (s *Store) OverdueTasks(ctx context.Context, grace time.Duration, limit int) ([]dispatch.Attempt, error) {
	var rows []taskRow
	err := s.db.NewSelect().Model(&rows).Where("status = 'processing' AND deadline_at < " + s.nowPlusSQL(-grace)).
		Order("deadline_at ASC").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, err
	}
	return s.attemptsOf(ctx, rows)
}

// LimiterRepair is one queue whose in_flight count did not match its rows in Processing.
type LimiterRepair struct {
	Queue    string
	Recorded int // in_flight before the repair
	Counted  int // rows in Processing and held slots
}

// ReconcileLimiters checks every queue's in_flight against its rows in Processing and its held
// slots (FinishReported), under the queue's lock, and repairs any mismatch.
func (s *Store) ReconcileLimiters(ctx context.Context) ([]LimiterRepair, error) {
	queues, err := s.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	var repairs []LimiterRepair
	for _, q := range queues {
		err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			locked, err := s.getQueue(ctx, tx, q.Name, lockWrite)
			if err != nil {
				return err
			}
			var n int
			err = tx.NewRaw("SELECT (SELECT count(*) FROM courier_tasks WHERE queue = ? AND status = 'processing') + "+
				"(SELECT coalesce(sum(slots), 0) FROM courier_task_slot_holds WHERE queue = ?)", q.Name, q.Name).Scan(ctx, &n)
			if err != nil {
				return err
			}
			if n == locked.InFlight {
				return nil
			}
			repairs = append(repairs, LimiterRepair{Queue: q.Name, Recorded: locked.InFlight, Counted: int(n)})
			if _, err := tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = ? WHERE name = ?", n, q.Name); err != nil {
				return err
			}
			return s.notifyTasks(ctx, tx, q.Name)
		})
		if err != nil {
			return repairs, err
		}
	}
	return repairs, nil
}
