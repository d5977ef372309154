package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// ClaimedTask is what a claimer needs to start one attempt's workflow.
type ClaimedTask struct {
	TaskID            string
	Version           int64
	Attempt           int
	Priority          int
	Queue             string
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration
	PushTimeout       time.Duration // one try of the push (the queue's push_timeout)
	CreatedAt         time.Time
	Trace             courier.TraceContext // the inserting request's trace: the attempt joins it
}

// BandCounts are ready tasks per priority band (index 0 is priority 1), each capped at the
// number of free slots.
type BandCounts [courier.PriorityBands]int

// notExpiredSQL keeps pending tasks past their pending timeout out of claims: the sweeper fails
// them.
func (s *Store) notExpiredSQL() string {
	return " AND (expires_at IS NULL OR expires_at > " + s.nowSQL() + ")"
}

// ClaimTasks is ClaimReady's tasks.
func (s *Store) ClaimTasks(ctx context.Context, queue string, max int, choose func(ready BandCounts, slots int) BandCounts) ([]ClaimedTask, error) {
	c, err := s.ClaimReady(ctx, queue, max, choose)
	return c.Tasks, err
}

// Claim is what one claim took.
type Claim struct {
	Tasks []ClaimedTask
	// NextToken is set when the queue's dispatch rate held back ready tasks: its next token
	// comes after this long.
	NextToken time.Duration
}

// ClaimReady moves up to max ready tasks of a queue to Processing in one transaction that
// locks the queue's limiter row: free slots are the limit minus in_flight, choose splits them
// across the bands that have ready tasks, each band's share is taken by higher version then
// oldest, and in_flight grows by the number taken. The count and the statuses change
// together, so the limit is exact. A paused queue (courier_pauses) claims nothing: the pause
// is read in the same transaction, so no claim that begins after a pause commits takes a task,
// on any worker. A queue with a dispatch rate takes one token per task from its bucket in the
// same transaction (store/ratelimit.go), so the rate holds across every worker. A keyed queue
// (courier.Queue.Keyed) takes each band's share key by key (task_claim_keys.go); a share its
// keys cannot use (each at its per-key limit) goes to the other bands.
func (s *Store) ClaimReady(ctx context.Context, queue string, max int, choose func(ready BandCounts, slots int) BandCounts) (Claim, error) {
	var out Claim
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		out = Claim{}
		q, err := s.getQueue(ctx, tx, queue, true)
		if err != nil {
			return err
		}
		slots := q.ConcurrencyLimit - q.InFlight
		if max > 0 && slots > max {
			slots = max
		}
		if slots <= 0 {
			return nil
		}
		if paused, err := s.queuePaused(ctx, tx, queue); err != nil || paused {
			return err
		}
		ready, err := s.readyBands(ctx, tx, queue, slots)
		if err != nil {
			return err
		}
		total := 0
		for _, n := range ready {
			total += n
		}
		if total == 0 {
			return nil
		}
		bucket := dispatchBucket(queue)
		if q.DispatchRate > 0 {
			took, wait, err := s.takeTokens(ctx, tx, bucket, q.DispatchRate, q.DispatchBucket(), min(slots, total))
			if err != nil {
				return err
			}
			if took < min(slots, total) {
				out.NextToken = wait
			}
			if slots = took; slots == 0 {
				return nil
			}
		}
		var keys *keyTurns
		if q.Keyed() {
			if keys, err = s.keysInFlight(ctx, tx, q); err != nil {
				return err
			}
		}
		// A band whose share its keys could not fill is left out of the next round, and what
		// is left of the slots is split again among the others.
		for round := 0; slots > len(out.Tasks) && round < courier.PriorityBands; round++ {
			take := choose(ready, slots-len(out.Tasks))
			progress := false
			for b := 1; b <= courier.PriorityBands; b++ {
				if take[b-1] <= 0 {
					continue
				}
				var rows []taskRow
				if keys != nil {
					rows, err = s.claimKeyed(ctx, tx, q, b, take[b-1], keys)
				} else {
					rows, err = s.claimBand(ctx, tx, queue, b, take[b-1])
				}
				if err != nil {
					return err
				}
				if len(rows) < take[b-1] {
					ready[b-1] = 0
				} else {
					ready[b-1] -= len(rows)
				}
				progress = progress || len(rows) > 0
				for i := range rows {
					t, err := rows[i].task()
					if err != nil {
						return err
					}
					eff := t.Overrides.Apply(q)
					out.Tasks = append(out.Tasks, ClaimedTask{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt, Priority: t.Priority,
						Queue: queue, ProcessingTimeout: eff.ProcessingTimeout, HeartbeatTimeout: eff.HeartbeatTimeout, PushTimeout: eff.PushTimeout,
						CreatedAt: t.CreatedAt, Trace: t.Trace})
				}
			}
			if !progress || keys == nil {
				break
			}
		}
		if q.DispatchRate > 0 {
			if err := s.giveBackTokens(ctx, tx, bucket, q.DispatchBucket(), slots-len(out.Tasks)); err != nil {
				return err
			}
		}
		if len(out.Tasks) == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight + ? WHERE name = ?", len(out.Tasks), queue)
		return err
	})
	return out, err
}

// dispatchBucket names a queue's dispatch token bucket in courier_rate_limits.
func dispatchBucket(queue string) string { return "queue-dispatch:" + queue }

// claimBand moves up to n ready tasks of one band to Processing: higher version first, then
// oldest.
func (s *Store) claimBand(ctx context.Context, tx bun.Tx, queue string, band, n int) ([]taskRow, error) {
	with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE queue = ? AND status = 'pending' " +
		"AND priority = ? AND next_attempt_at <= " + s.nowSQL() + s.notExpiredSQL() +
		" ORDER BY version DESC, created_at ASC, task_id ASC LIMIT ?")
	return s.markClaimed(ctx, tx, with, in, queue, band, n)
}

// markClaimed moves the pending rows the condition in names to Processing, on their next
// attempt, and returns them.
func (s *Store) markClaimed(ctx context.Context, tx bun.Tx, with, in string, args ...any) ([]taskRow, error) {
	var rows []taskRow
	err := tx.NewRaw(with+"UPDATE courier_tasks SET status = 'processing', attempt = attempt + 1, claimed_at = "+s.nowSQL()+
		", pushed_at = NULL, deadline_at = NULL, run_id = NULL, heartbeat_timeout_ms = 0, updated_at = "+s.nowSQL()+" WHERE "+in+" AND status = 'pending' RETURNING *",
		args...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return rows, nil
}

// queuePaused reports whether an operator paused the queue (docs/flow-control.md).
func (s *Store) queuePaused(ctx context.Context, tx bun.Tx, queue string) (bool, error) {
	n, err := tx.NewSelect().Model((*pauseRow)(nil)).Where("kind = ? AND name = ?", string(courier.PauseQueue), queue).Count(ctx)
	return n > 0, err
}

// readyBands counts a queue's ready tasks per band, each count capped at max, in one
// statement: the claim holds the queue's limiter row meanwhile, so every round trip saved is
// time the finishes of that queue do not wait.
func (s *Store) readyBands(ctx context.Context, tx bun.Tx, queue string, max int) (BandCounts, error) {
	var (
		cols []string
		args []any
	)
	for b := 1; b <= courier.PriorityBands; b++ {
		cols = append(cols, fmt.Sprintf("(SELECT count(*) FROM (SELECT 1 FROM courier_tasks WHERE queue = ? AND status = 'pending' "+
			"AND priority = %d AND next_attempt_at <= %s%s LIMIT ?) AS r%d)", b, s.nowSQL(), s.notExpiredSQL(), b))
		args = append(args, queue, max)
	}
	var c BandCounts
	if err := tx.NewRaw("SELECT "+strings.Join(cols, ", "), args...).Scan(ctx, &c[0], &c[1], &c[2], &c[3], &c[4]); err != nil {
		return BandCounts{}, err
	}
	return c, nil
}

// UnpushedTasks returns tasks in Processing whose attempt has not reached its push within
// olderThan of being claimed: a claimer crashed between the claim and the workflow start, or
// the start failed. Starting their workflows again is idempotent.
func (s *Store) UnpushedTasks(ctx context.Context, olderThan time.Duration, limit int) ([]ClaimedTask, error) {
	var rows []taskRow
	err := s.db.NewSelect().Model(&rows).Where("status = 'processing' AND pushed_at IS NULL AND claimed_at < " + s.nowPlusSQL(-olderThan)).
		Order("claimed_at ASC").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, err
	}
	return s.claimedTasks(ctx, rows)
}

// claimedTasks turns rows in Processing into ClaimedTasks with their effective timeouts.
func (s *Store) claimedTasks(ctx context.Context, rows []taskRow) ([]ClaimedTask, error) {
	queues := map[string]courier.Queue{}
	var out []ClaimedTask
	for i := range rows {
		t, err := rows[i].task()
		if err != nil {
			return nil, err
		}
		q, ok := queues[t.Queue]
		if !ok {
			if q, err = s.GetQueue(ctx, t.Queue); err != nil {
				return nil, err
			}
			queues[t.Queue] = q
		}
		eff := t.Overrides.Apply(q)
		out = append(out, ClaimedTask{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt, Priority: t.Priority,
			Queue: t.Queue, ProcessingTimeout: eff.ProcessingTimeout, HeartbeatTimeout: eff.HeartbeatTimeout, PushTimeout: eff.PushTimeout,
			CreatedAt: t.CreatedAt, Trace: t.Trace})
	}
	return out, nil
}

// PushTarget is a task attempt with where to push it.
type PushTarget struct {
	Task  courier.Task
	Queue courier.Queue
}

// AttemptRun is the workflow run an attempt's push belongs to: its run id ("" when unknown) and
// the attempt's heartbeat timeout (0: none), which tells the gateway how the run takes the
// worker's result.
type AttemptRun struct {
	ID               string
	HeartbeatTimeout time.Duration
}

// MarkTaskPushed records that an attempt is about to be pushed, its deadline (now plus the
// processing time Temporal still allows it) and the workflow run it belongs to, if the task is
// still in Processing on that attempt; ok is false otherwise (the attempt is stale: cancelled,
// or an earlier run of the workflow already finished it). The run is written in the same
// guarded update, so a cancel that commits after it knows exactly which run to cancel, and one
// that commits before it needs none (this push then finds the row cancelled); a result that
// follows the push knows how to hand itself to that run.
func (s *Store) MarkTaskPushed(ctx context.Context, taskID string, version int64, attempt int, processingTimeout time.Duration, r AttemptRun) (PushTarget, bool, error) {
	var run any
	if r.ID != "" {
		run = r.ID
	}
	// One statement, committed on its own: RETURNING reads the row as this update left it.
	// PostgreSQL reads the queue's settings in the same statement; SQLite in a second one. A
	// queue changed in between would have been read either way.
	var rows []pushedRow
	set := "SET pushed_at = " + s.nowSQL() + ", deadline_at = " + s.nowPlusSQL(processingTimeout) + ", run_id = ?, heartbeat_timeout_ms = ? " +
		"WHERE task_id = ? AND version = ? AND attempt = ? AND status = 'processing'"
	var err error
	if s.pg {
		err = s.db.NewRaw("WITH pushed AS (UPDATE courier_tasks "+set+" RETURNING *) "+
			"SELECT pushed.*, q.config AS queue_config, q.concurrency_limit AS queue_limit, q.in_flight AS queue_in_flight, "+
			"q.created_at AS queue_created_at, q.updated_at AS queue_updated_at "+
			"FROM pushed JOIN courier_task_queues q ON q.name = pushed.queue", run, r.HeartbeatTimeout.Milliseconds(), taskID, version, attempt).Scan(ctx, &rows)
	} else {
		err = s.db.NewRaw("UPDATE courier_tasks "+set+" RETURNING *", run, r.HeartbeatTimeout.Milliseconds(), taskID, version, attempt).Scan(ctx, &rows)
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return PushTarget{}, false, err
	}
	if len(rows) == 0 {
		return PushTarget{}, false, nil
	}
	t, err := rows[0].task()
	if err != nil {
		return PushTarget{}, false, err
	}
	var q courier.Queue
	if s.pg {
		qr := queueRow{Name: t.Queue, Config: rows[0].QueueConfig, ConcurrencyLimit: rows[0].QueueLimit, InFlight: rows[0].QueueInFlight,
			CreatedAt: rows[0].QueueCreatedAt, UpdatedAt: rows[0].QueueUpdatedAt}
		q, err = qr.queue()
	} else {
		q, err = s.GetQueue(ctx, t.Queue)
	}
	if err != nil {
		return PushTarget{}, false, err
	}
	return PushTarget{Task: t, Queue: t.Overrides.Apply(q)}, true, nil
}

// pushedRow is a task row as MarkTaskPushed's update left it, with its queue's row beside it
// (PostgreSQL).
type pushedRow struct {
	taskRow
	QueueConfig    string    `bun:"queue_config"`
	QueueLimit     int       `bun:"queue_limit"`
	QueueInFlight  int       `bun:"queue_in_flight"`
	QueueCreatedAt time.Time `bun:"queue_created_at"`
	QueueUpdatedAt time.Time `bun:"queue_updated_at"`
}
