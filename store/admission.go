package store

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// BacklogRetryAfter is the Retry-After of an insert refused because its queue's backlog is full:
// how long a drain takes is unknown, so the hint is a fixed, modest wait.
const BacklogRetryAfter = 5 * time.Second

// backlogLockClass is the first key of the PostgreSQL advisory locks that serialise backlog
// checks per queue ("cour" in ASCII); the second is the hash of the queue's name.
const backlogLockClass = 0x636f7572

// admitPending enforces a queue's backlog budget (max_pending) inside an insert's transaction:
// an insert that leaves taskID Pending in q is refused with backlog_full when q's other Pending
// tasks already fill the budget, and the caller's transaction then rolls back, so nothing is
// written. It runs after the insert's own write, so superseded versions are already out of the
// count and the task's own row is never counted. The count stops at the budget, so it reads at
// most max_pending entries of the pending index.
//
// On PostgreSQL a transaction-scoped advisory lock per queue serialises the checks of
// concurrent inserts into one queue (only of inserts: claimers never take it), so the budget is
// exact; SQLite's single writer serialises them already.
func (s *Store) admitPending(ctx context.Context, tx bun.Tx, q courier.Queue, taskID string) error {
	if q.MaxPending <= 0 {
		return nil
	}
	if s.pg {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(?, hashtext(?))", backlogLockClass, q.Name); err != nil {
			return err
		}
	}
	var others int
	if err := tx.NewRaw("SELECT count(*) FROM (SELECT 1 FROM courier_tasks WHERE queue = ? AND status = 'pending' AND task_id <> ? LIMIT ?) AS backlog",
		q.Name, taskID, q.MaxPending).Scan(ctx, &others); err != nil {
		return err
	}
	if others < q.MaxPending {
		return nil
	}
	return &courier.Error{
		Code:       courier.CodeBacklogFull,
		Message:    fmt.Sprintf("queue %q already holds its budget of %d pending tasks; retry once workers have drained some", q.Name, q.MaxPending),
		Details:    map[string]any{"queue": q.Name, "max_pending": q.MaxPending},
		RetryAfter: BacklogRetryAfter,
	}
}
