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
	"github.com/courier-oss/courier/dispatch"
)

// notExpiredSQL keeps pending tasks past their pending timeout out of claims: the sweeper fails
// them.
func (s *Store) notExpiredSQL() string {
	return " AND (expires_at IS NULL OR expires_at > " + s.nowSQL() + ")"
}

// RunClaim runs fn in one transaction on a queue's tasks, given the transaction as the dispatch
// rules see it (dispatch.ClaimTx), and commits it when fn returns nil. The rules decide; the
// store runs the SQL they ask for. The transaction begins by locking the queue's limiter row
// (claimTx.Queue), so the queue's claims, finishes and cancels take turns.
func (s *Store) RunClaim(ctx context.Context, queue string, fn func(context.Context, dispatch.ClaimTx) error) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return fn(ctx, &claimTx{s: s, tx: tx, queue: queue})
	})
}

// claimTx is a claim transaction on one queue (dispatch.ClaimTx).
type claimTx struct {
	s     *Store
	tx    bun.Tx
	queue string
	// tokensAt is when the claim took its tokens from the queue's dispatch bucket (zero: it
	// took none): its tasks' claimed_at, so that the claims a second holds by their
	// claimed_at are those the bucket allowed in it, however long the transaction took
	// between the two.
	tokensAt time.Time
}

var _ dispatch.ClaimTx = (*claimTx)(nil)

func (c *claimTx) Open(ctx context.Context, max int) (dispatch.Opened, error) {
	return c.s.openClaim(ctx, c.tx, c.queue, max)
}

func (c *claimTx) ClaimBands(ctx context.Context, take dispatch.BandCounts, batch string) ([]courier.Task, error) {
	return tasksOf(c.s.claimBands(ctx, c.tx, c.queue, take, batch, c.tokensAt))
}

func (c *claimTx) TakeTokens(ctx context.Context, rate float64, burst, want int) (int, time.Duration, error) {
	took, wait, at, err := c.s.takeTokens(ctx, c.tx, dispatchBucket(c.queue), rate, burst, want)
	if took > 0 {
		c.tokensAt = at
	}
	return took, wait, err
}

func (c *claimTx) GiveBackTokens(ctx context.Context, burst, n int) error {
	return c.s.giveBackTokens(ctx, c.tx, dispatchBucket(c.queue), burst, n)
}

func (c *claimTx) KeysInFlight(ctx context.Context) (map[string]int, error) {
	return c.s.keysInFlight(ctx, c.tx, c.queue)
}

func (c *claimTx) KeyCandidates(ctx context.Context, band, n int) ([]dispatch.KeyCandidate, error) {
	return c.s.keyCandidates(ctx, c.tx, c.queue, band, n)
}

func (c *claimTx) ClaimBand(ctx context.Context, band, n int, batch string) ([]courier.Task, error) {
	return tasksOf(c.s.claimBand(ctx, c.tx, c.queue, band, n, batch, c.tokensAt))
}

func (c *claimTx) ClaimPicked(ctx context.Context, picked []dispatch.KeyCandidate, batch string) ([]courier.Task, error) {
	return tasksOf(c.s.claimPicked(ctx, c.tx, picked, batch, c.tokensAt))
}

func (c *claimTx) AddInFlight(ctx context.Context, n int) error {
	_, err := c.tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight + ? WHERE name = ?", n, c.queue)
	return err
}

// tasksOf turns claimed rows into tasks.
func tasksOf(rows []taskRow, err error) ([]courier.Task, error) {
	if err != nil {
		return nil, err
	}
	out := make([]courier.Task, len(rows))
	for i := range rows {
		if out[i], err = rows[i].task(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dispatchBucket names a queue's dispatch token bucket in courier_rate_limits.
func dispatchBucket(queue string) string { return "queue-dispatch:" + queue }

// claimBand moves up to n ready tasks of one band to Processing: higher version first, then
// oldest.
func (s *Store) claimBand(ctx context.Context, tx bun.Tx, queue string, band, n int, batch string, at time.Time) ([]taskRow, error) {
	with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE queue = ? AND status = 'pending' " +
		"AND priority = ? AND next_attempt_at <= " + s.nowSQL() + s.notExpiredSQL() +
		" ORDER BY version DESC, created_at ASC, task_id ASC LIMIT ?")
	return s.markClaimed(ctx, tx, batch, at, with, in, queue, band, n)
}

// claimBands is ClaimTx.ClaimBands. On PostgreSQL one statement picks every band's share (each
// band's first by claim order, skipping rows another transaction holds), moves them to
// Processing and counts them on the queue's limiter row; SQLite claims band by band.
func (s *Store) claimBands(ctx context.Context, tx bun.Tx, queue string, take dispatch.BandCounts, batch string, at time.Time) ([]taskRow, error) {
	if !s.pg {
		var rows []taskRow
		for b := 1; b <= courier.PriorityBands; b++ {
			if take[b-1] <= 0 {
				continue
			}
			claimed, err := s.claimBand(ctx, tx, queue, b, take[b-1], batch, at)
			if err != nil {
				return nil, err
			}
			rows = append(rows, claimed...)
		}
		if len(rows) == 0 {
			return nil, nil
		}
		_, err := tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight + ? WHERE name = ?", len(rows), queue)
		return rows, err
	}
	var (
		picks, union []string
		args         []any
	)
	for b := 1; b <= courier.PriorityBands; b++ {
		if take[b-1] <= 0 {
			continue
		}
		picks = append(picks, fmt.Sprintf("p%d AS MATERIALIZED (SELECT ctid FROM courier_tasks WHERE queue = ? AND status = 'pending' AND priority = %d "+
			"AND next_attempt_at <= %s%s ORDER BY version DESC, created_at ASC, task_id ASC LIMIT ? FOR UPDATE SKIP LOCKED)", b, b, s.nowSQL(), s.notExpiredSQL()))
		union = append(union, fmt.Sprintf("SELECT ctid FROM p%d", b))
		args = append(args, queue, take[b-1])
	}
	if len(picks) == 0 {
		return nil, nil
	}
	// Each band's pick is a MATERIALIZED CTE, evaluated exactly once (see picked), that locks
	// its rows; they are updated by their row ids (a TID scan: the rows stay locked, so the ids
	// hold, and the plan never turns to a scan of the table), and counted on the limiter row
	// (already locked by openClaim) by a second data-modifying CTE.
	var rows []taskRow
	err := tx.NewRaw("WITH "+strings.Join(picks, ", ")+", "+
		"claimed AS (UPDATE courier_tasks "+s.claimSetSQL(batch, at)+" WHERE ctid = ANY(ARRAY("+strings.Join(union, " UNION ALL ")+")) AND status = 'pending' RETURNING *), "+
		"counted AS (UPDATE courier_task_queues SET in_flight = in_flight + (SELECT count(*) FROM claimed) WHERE name = ? AND EXISTS (SELECT 1 FROM claimed)) "+
		"SELECT * FROM claimed ORDER BY priority, version DESC, created_at, task_id", append(args, queue)...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return rows, nil
}

// markClaimed moves the pending rows the condition in names to Processing, on their next
// attempt pushed by batch ("": a run of its own), claimed at at (zero: now), and returns them.
func (s *Store) markClaimed(ctx context.Context, tx bun.Tx, batch string, at time.Time, with, in string, args ...any) ([]taskRow, error) {
	var rows []taskRow
	err := tx.NewRaw(with+"UPDATE courier_tasks "+s.claimSetSQL(batch, at)+" WHERE "+in+" AND status = 'pending' RETURNING *", args...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return rows, nil
}

// claimSetSQL is the SET clause that moves a pending row to Processing on its next attempt,
// pushed by batch ("": a run of its own), claimed at at (zero: now; a rate-limited claim passes
// the time it took its tokens). The batch and the time are literals, so the statement's
// placeholders stay in the caller's order.
func (s *Store) claimSetSQL(batch string, at time.Time) string {
	batchSQL := "NULL"
	if batch != "" {
		batchSQL = string(s.db.Dialect().AppendString(nil, batch))
	}
	claimedAt := s.nowSQL()
	if !at.IsZero() {
		claimedAt = s.timeSQL(at)
	}
	return "SET status = 'processing', attempt = attempt + 1, claimed_at = " + claimedAt +
		", pushed_at = NULL, deadline_at = NULL, timeout_at = NULL, run_id = NULL, batch_id = " + batchSQL +
		", heartbeat_timeout_ms = 0, updated_at = " + s.nowSQL()
}

// queuePaused reports whether an operator paused the queue (docs/flow-control.md).
func (s *Store) queuePaused(ctx context.Context, tx bun.Tx, queue string) (bool, error) {
	n, err := tx.NewSelect().Model((*pauseRow)(nil)).Where("kind = ? AND name = ?", string(courier.PauseQueue), queue).Count(ctx)
	return n > 0, err
}

// readySQL selects up to a bound (the last placeholder) of a queue's ready tasks of one band:
// pending, due and within their pending timeout.
func (s *Store) readySQL(band int) string {
	return fmt.Sprintf("SELECT 1 FROM courier_tasks WHERE queue = ? AND status = 'pending' AND priority = %d AND next_attempt_at <= %s%s LIMIT ?",
		band, s.nowSQL(), s.notExpiredSQL())
}

// openClaim is ClaimTx.Open. On PostgreSQL one statement locks the queue's limiter row and
// reads the pause and the ready bands beside it (counted only when a slot is free and the queue
// runs): the claim holds the limiter row from here to its commit, so every round trip saved is
// time the queue's finishes and other claims do not wait. SQLite, in process and with its
// writers already serialised, reads them one after the other.
func (s *Store) openClaim(ctx context.Context, tx bun.Tx, queue string, max int) (dispatch.Opened, error) {
	var out dispatch.Opened
	if !s.pg {
		q, err := s.getQueue(ctx, tx, queue, lockWrite)
		out.Queue = q
		if err != nil || q.InFlight >= q.ConcurrencyLimit {
			return out, err
		}
		if out.Paused, err = s.queuePaused(ctx, tx, queue); err != nil || out.Paused {
			return out, err
		}
		var (
			cols []string
			args []any
		)
		for b := 1; b <= courier.PriorityBands; b++ {
			cols = append(cols, fmt.Sprintf("(SELECT count(*) FROM (%s) AS r%d)", s.readySQL(b), b))
			args = append(args, queue, max)
		}
		c := &out.Ready
		err = tx.NewRaw("SELECT "+strings.Join(cols, ", "), args...).Scan(ctx, &c[0], &c[1], &c[2], &c[3], &c[4])
		return out, err
	}
	paused := "EXISTS (SELECT 1 FROM courier_pauses p WHERE p.kind = '" + string(courier.PauseQueue) + "' AND p.name = q.name)"
	cols := []string{"q.name", "q.config", "q.concurrency_limit", "q.in_flight", "q.created_at", "q.updated_at", paused + " AS paused"}
	var args []any
	for b := 1; b <= courier.PriorityBands; b++ {
		cols = append(cols, fmt.Sprintf("CASE WHEN q.in_flight < q.concurrency_limit AND NOT %s THEN (SELECT count(*) FROM (%s) AS r%d) ELSE 0 END",
			paused, s.readySQL(b), b))
		args = append(args, queue, max)
	}
	var row queueRow
	err := tx.NewRaw("SELECT "+strings.Join(cols, ", ")+" FROM courier_task_queues q WHERE q.name = ? FOR "+lockWrite+" OF q", append(args, queue)...).
		Scan(ctx, &row.Name, &row.Config, &row.ConcurrencyLimit, &row.InFlight, &row.CreatedAt, &row.UpdatedAt, &out.Paused,
			&out.Ready[0], &out.Ready[1], &out.Ready[2], &out.Ready[3], &out.Ready[4])
	if errors.Is(err, sql.ErrNoRows) {
		return out, courier.Errorf(courier.CodeNotFound, "queue %q not found", queue)
	}
	if err != nil {
		return out, err
	}
	out.Queue, err = row.queue()
	return out, err
}

// UnpushedTasks returns the attempts of tasks in Processing that have not reached their push
// within olderThan of being claimed: a claimer crashed between the claim and the workflow
// start, or the start failed. Starting their workflows again is idempotent.
func (s *Store) UnpushedTasks(ctx context.Context, olderThan time.Duration, limit int) ([]dispatch.Attempt, error) {
	var rows []taskRow
	err := s.db.NewSelect().Model(&rows).Where("status = 'processing' AND pushed_at IS NULL AND claimed_at < " + s.nowPlusSQL(-olderThan)).
		Order("claimed_at ASC").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, err
	}
	return s.attemptsOf(ctx, rows)
}

// attemptsOf turns rows in Processing into their attempts under their queues' settings.
func (s *Store) attemptsOf(ctx context.Context, rows []taskRow) ([]dispatch.Attempt, error) {
	queues := map[string]courier.Queue{}
	var out []dispatch.Attempt
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
		out = append(out, dispatch.AttemptOf(t, q))
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
