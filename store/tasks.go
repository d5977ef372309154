package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// The task tables (contract: docs/tasks.md).
type queueRow struct {
	bun.BaseModel `bun:"table:courier_task_queues"`

	Name             string    `bun:"name,pk"`
	Config           string    `bun:"config"`
	ConcurrencyLimit int       `bun:"concurrency_limit"`
	InFlight         int       `bun:"in_flight"`
	CreatedAt        time.Time `bun:"created_at"`
	UpdatedAt        time.Time `bun:"updated_at"`
}

func (r *queueRow) queue() (courier.Queue, error) {
	var q courier.Queue
	if err := json.Unmarshal([]byte(r.Config), &q); err != nil {
		return q, fmt.Errorf("queue %q: config is not valid JSON: %w", r.Name, err)
	}
	q = q.WithDefaults()
	q.Name, q.ConcurrencyLimit, q.InFlight = r.Name, r.ConcurrencyLimit, r.InFlight
	q.CreatedAt, q.UpdatedAt = r.CreatedAt.UTC(), r.UpdatedAt.UTC()
	return q, nil
}

type taskRow struct {
	bun.BaseModel `bun:"table:courier_tasks"`

	TaskID        string       `bun:"task_id,pk"`
	Version       int64        `bun:"version,pk"`
	Queue         string       `bun:"queue"`
	Priority      int          `bun:"priority"`
	Status        string       `bun:"status"`
	Payload       string       `bun:"payload"`
	Overrides     string       `bun:"overrides"`
	Attempt       int          `bun:"attempt"`
	AttemptBase   int          `bun:"attempt_base"`
	Result        *string      `bun:"result"`
	StatusCode    int          `bun:"status_code"`
	Message       string       `bun:"message"`
	NextAttemptAt time.Time    `bun:"next_attempt_at"`
	ExpiresAt     bun.NullTime `bun:"expires_at"`
	ClaimedAt     bun.NullTime `bun:"claimed_at"`
	PushedAt      bun.NullTime `bun:"pushed_at"`
	DeadlineAt    bun.NullTime `bun:"deadline_at"`
	RunID         *string      `bun:"run_id"`
	TraceParent   *string      `bun:"traceparent"`
	TraceState    *string      `bun:"tracestate"`
	FinishedAt    bun.NullTime `bun:"finished_at"`
	CreatedAt     time.Time    `bun:"created_at"`
	UpdatedAt     time.Time    `bun:"updated_at"`
}

func nullTime(t bun.NullTime) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// nullString stores "" as NULL.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (r *taskRow) task() (courier.Task, error) {
	t := courier.Task{
		TaskID: r.TaskID, Version: r.Version, Queue: r.Queue, Priority: r.Priority,
		Status: courier.TaskStatus(r.Status), Payload: json.RawMessage(r.Payload),
		Attempt: r.Attempt, Attempts: r.Attempt - r.AttemptBase, StatusCode: r.StatusCode, Message: r.Message,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), NextAttemptAt: r.NextAttemptAt.UTC(),
		ExpiresAt: nullTime(r.ExpiresAt), ClaimedAt: nullTime(r.ClaimedAt), PushedAt: nullTime(r.PushedAt),
		FinishedAt: nullTime(r.FinishedAt),
	}
	if r.Result != nil {
		t.Result = json.RawMessage(*r.Result)
	}
	if r.RunID != nil {
		t.RunID = *r.RunID
	}
	if r.TraceParent != nil {
		t.Trace.Parent = *r.TraceParent
	}
	if r.TraceState != nil {
		t.Trace.State = *r.TraceState
	}
	if err := json.Unmarshal([]byte(r.Overrides), &t.Overrides); err != nil {
		return t, fmt.Errorf("task %s/%d: overrides are not valid JSON: %w", r.TaskID, r.Version, err)
	}
	return t, nil
}

// forUpdate locks the selected rows on PostgreSQL; SQLite's immediate transactions already
// serialise writers.
func (s *Store) forUpdate() string {
	if s.pg {
		return " FOR UPDATE"
	}
	return ""
}

// notExpiredSQL keeps pending tasks past their pending timeout out of claims: the sweeper fails
// them.
func (s *Store) notExpiredSQL() string {
	return " AND (expires_at IS NULL OR expires_at > " + s.nowSQL() + ")"
}

// picked builds a statement over the rows a bounded SELECT picks: on PostgreSQL the pick is a
// MATERIALIZED CTE with FOR UPDATE SKIP LOCKED, evaluated exactly once (a plain IN subquery
// with LIMIT may be re-scanned per row while the statement changes the rows it filters on, and
// then take far more than its limit); SQLite evaluates an uncorrelated IN subquery once.
// It returns the WITH prefix and the condition naming the picked (task_id, version) rows.
func (s *Store) picked(sub string) (with, in string) {
	if s.pg {
		return "WITH picked AS MATERIALIZED (" + sub + " FOR UPDATE SKIP LOCKED) ",
			"(task_id, version) IN (SELECT task_id, version FROM picked)"
	}
	return "", "(task_id, version) IN (" + sub + ")"
}

// notifyTasks wakes claimers listening on PostgreSQL (delivered at commit).
func (s *Store) notifyTasks(ctx context.Context, tx bun.Tx, queue string) error {
	if !s.pg {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SELECT pg_notify('courier_tasks', ?)", queue)
	return err
}

// --- queues ---

// PutQueue creates or replaces a queue's configuration (after WithDefaults and Validate) and
// reports whether it was created. The limiter count is kept.
func (s *Store) PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error) {
	q = q.WithDefaults()
	if err := q.Validate(); err != nil {
		return courier.Queue{}, false, err
	}
	cfg, err := json.Marshal(q)
	if err != nil {
		return courier.Queue{}, false, err
	}
	var created bool
	var out courier.Queue
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// Insert-if-absent first, so two PUTs creating one queue never collide.
		res, err := tx.NewInsert().Model(&queueRow{Name: q.Name, Config: string(cfg), ConcurrencyLimit: q.ConcurrencyLimit}).
			ExcludeColumn("in_flight", "created_at", "updated_at").On("CONFLICT (name) DO NOTHING").Exec(ctx)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		created = n == 1
		if !created {
			_, err = tx.NewUpdate().Model((*queueRow)(nil)).Set("config = ?", string(cfg)).
				Set("concurrency_limit = ?", q.ConcurrencyLimit).Set("updated_at = "+s.nowSQL()).
				Where("name = ?", q.Name).Exec(ctx)
		}
		if err != nil {
			return err
		}
		if err := s.notifyTasks(ctx, tx, q.Name); err != nil { // a raised limit frees slots now
			return err
		}
		out, err = s.getQueue(ctx, tx, q.Name, false)
		return err
	})
	return out, created, err
}

func (s *Store) getQueue(ctx context.Context, db bun.IDB, name string, lock bool) (courier.Queue, error) {
	var row queueRow
	q := db.NewSelect().Model(&row).Where("name = ?", name)
	if lock && s.pg {
		q = q.For("UPDATE")
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Queue{}, courier.Errorf(courier.CodeNotFound, "queue %q not found", name)
	}
	if err != nil {
		return courier.Queue{}, err
	}
	return row.queue()
}

// GetQueue returns one queue with its defaults applied, or not_found.
func (s *Store) GetQueue(ctx context.Context, name string) (courier.Queue, error) {
	return s.getQueue(ctx, s.db, name, false)
}

// ListQueues returns every queue by name.
func (s *Store) ListQueues(ctx context.Context) ([]courier.Queue, error) {
	var rows []queueRow
	if err := s.db.NewSelect().Model(&rows).Order("name ASC").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]courier.Queue, 0, len(rows))
	for i := range rows {
		q, err := rows[i].queue()
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// --- insert with the version rules ---

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
	overrides, err := json.Marshal(r.Overrides)
	if err != nil {
		return courier.Task{}, "", err
	}
	var (
		out     courier.Task
		outcome courier.TaskInsertOutcome
	)
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		q, err := s.getQueue(ctx, tx, r.Queue, false)
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
		if _, err := tx.ExecContext(ctx, "INSERT INTO courier_task_heads (task_id, max_version) VALUES (?, 0) ON CONFLICT (task_id) DO NOTHING", r.TaskID); err != nil {
			return err
		}
		var head int64
		if err := tx.NewRaw("SELECT max_version FROM courier_task_heads WHERE task_id = ?"+s.forUpdate(), r.TaskID).Scan(ctx, &head); err != nil {
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
		pendingExpiry := s.nowPlusSQL(q.PendingTimeout)
		switch {
		case exists && (cur.Status == string(courier.TaskProcessing) || cur.Status == string(courier.TaskSuccess)):
			outcome = courier.TaskExisting
		case exists && cur.Status == string(courier.TaskPending) && cur.Queue == r.Queue && cur.Priority == r.Priority &&
			cur.Overrides == string(overrides) && jsonEqual(cur.Payload, r.Payload):
			outcome = courier.TaskExisting
		case exists:
			// pending with new content, failed, stopped or cancelled: the request replaces it.
			// The attempt number keeps counting, so a late result from an earlier life can
			// never match; attempt_base restarts the retry budget.
			_, err = tx.NewUpdate().Model((*taskRow)(nil)).
				Set("queue = ?, priority = ?, payload = ?, overrides = ?", r.Queue, r.Priority, string(r.Payload), string(overrides)).
				Set("traceparent = ?, tracestate = ?", nullString(r.Trace.Parent), nullString(r.Trace.State)).
				Set("status = 'pending', attempt_base = attempt, result = NULL, status_code = 0, message = ''").
				Set("next_attempt_at = "+s.nowSQL()).Set("expires_at = "+pendingExpiry).
				Set("claimed_at = NULL, pushed_at = NULL, deadline_at = NULL, run_id = NULL, finished_at = NULL").Set("updated_at = "+s.nowSQL()).
				Where("task_id = ? AND version = ?", r.TaskID, r.Version).Exec(ctx)
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
			_, err = tx.NewRaw("INSERT INTO courier_tasks (task_id, version, queue, priority, status, payload, overrides, "+
				"traceparent, tracestate, next_attempt_at, expires_at, created_at, updated_at) VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, "+
				s.nowSQL()+", "+pendingExpiry+", "+s.nowSQL()+", "+s.nowSQL()+")",
				r.TaskID, r.Version, r.Queue, r.Priority, string(r.Payload), string(overrides),
				nullString(r.Trace.Parent), nullString(r.Trace.State)).Exec(ctx)
			outcome = courier.TaskCreated
		}
		if err != nil {
			return err
		}
		if outcome != courier.TaskExisting {
			if err := s.admitPending(ctx, tx, q, r.TaskID); err != nil { // backlog budget (store/admission.go)
				return err
			}
			if err := s.notifyTasks(ctx, tx, r.Queue); err != nil {
				return err
			}
		}
		out, err = s.getTask(ctx, tx, r.TaskID, r.Version, false)
		return err
	})
	return out, outcome, err
}

func jsonEqual(stored string, req json.RawMessage) bool {
	var a, b bytes.Buffer
	if json.Compact(&a, []byte(stored)) != nil || json.Compact(&b, req) != nil {
		return false
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}

func (s *Store) getTask(ctx context.Context, db bun.IDB, taskID string, version int64, lock bool) (courier.Task, error) {
	var row taskRow
	q := db.NewSelect().Model(&row).Where("task_id = ? AND version = ?", taskID, version)
	if lock && s.pg {
		q = q.For("UPDATE")
	}
	err := q.Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Task{}, courier.Errorf(courier.CodeNotFound, "task %q version %d not found", taskID, version)
	}
	if err != nil {
		return courier.Task{}, err
	}
	return row.task()
}

// GetTask returns one task version, or not_found.
func (s *Store) GetTask(ctx context.Context, taskID string, version int64) (courier.Task, error) {
	return s.getTask(ctx, s.db, taskID, version, false)
}

// GetLatestTask returns the highest stored version of a task, or not_found. Purges never delete
// the row of the highest version accepted, so this is the latest version.
func (s *Store) GetLatestTask(ctx context.Context, taskID string) (courier.Task, error) {
	var row taskRow
	err := s.db.NewSelect().Model(&row).Where("task_id = ?", taskID).Order("version DESC").Limit(1).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.Task{}, courier.Errorf(courier.CodeNotFound, "task %q not found", taskID)
	}
	if err != nil {
		return courier.Task{}, err
	}
	return row.task()
}

// TaskHead returns the highest version ever accepted for taskID (0 if none).
func (s *Store) TaskHead(ctx context.Context, taskID string) (int64, error) {
	var head int64
	err := s.db.NewRaw("SELECT max_version FROM courier_task_heads WHERE task_id = ?", taskID).Scan(ctx, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return head, err
}

// --- dispatch ---

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
type BandCounts [5]int

// ClaimTasks moves up to max ready tasks of a queue to Processing in one transaction that
// locks the queue's limiter row: free slots are the limit minus in_flight, choose splits them
// across the bands that have ready tasks, each band's share is taken by higher version then
// oldest, and in_flight grows by the number taken. The count and the statuses change
// together, so the limit is exact.
func (s *Store) ClaimTasks(ctx context.Context, queue string, max int, choose func(ready BandCounts, slots int) BandCounts) ([]ClaimedTask, error) {
	var out []ClaimedTask
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		out = out[:0]
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
		var ready BandCounts
		total := 0
		for b := 1; b <= 5; b++ {
			var n int
			if err := tx.NewRaw("SELECT count(*) FROM (SELECT 1 FROM courier_tasks WHERE queue = ? AND status = 'pending' "+
				"AND priority = ? AND next_attempt_at <= "+s.nowSQL()+s.notExpiredSQL()+" LIMIT ?) AS r", queue, b, slots).Scan(ctx, &n); err != nil {
				return err
			}
			ready[b-1] = n
			total += n
		}
		if total == 0 {
			return nil
		}
		take := choose(ready, slots)
		for b := 1; b <= 5; b++ {
			if take[b-1] <= 0 {
				continue
			}
			with, in := s.picked("SELECT task_id, version FROM courier_tasks WHERE queue = ? AND status = 'pending' " +
				"AND priority = ? AND next_attempt_at <= " + s.nowSQL() + s.notExpiredSQL() +
				" ORDER BY version DESC, created_at ASC, task_id ASC LIMIT ?")
			var rows []taskRow
			err := tx.NewRaw(with+"UPDATE courier_tasks SET status = 'processing', attempt = attempt + 1, claimed_at = "+s.nowSQL()+
				", pushed_at = NULL, deadline_at = NULL, run_id = NULL, updated_at = "+s.nowSQL()+" WHERE "+in+" AND status = 'pending' RETURNING *",
				queue, b, take[b-1]).Scan(ctx, &rows)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			for i := range rows {
				t, err := rows[i].task()
				if err != nil {
					return err
				}
				eff := t.Overrides.Apply(q)
				out = append(out, ClaimedTask{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt, Priority: t.Priority,
					Queue: queue, ProcessingTimeout: eff.ProcessingTimeout, HeartbeatTimeout: eff.HeartbeatTimeout, PushTimeout: eff.PushTimeout,
					CreatedAt: t.CreatedAt, Trace: t.Trace})
			}
		}
		if len(out) == 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight + ? WHERE name = ?", len(out), queue)
		return err
	})
	return out, err
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

// OverdueTasks returns up to limit tasks in Processing whose processing deadline passed more
// than grace ago, most overdue first: Temporal should have ended their attempt by then, so the
// sweeper checks that their workflow still runs (an operator may have terminated it).
func (s *Store) OverdueTasks(ctx context.Context, grace time.Duration, limit int) ([]ClaimedTask, error) {
	var rows []taskRow
	err := s.db.NewSelect().Model(&rows).Where("status = 'processing' AND deadline_at < " + s.nowPlusSQL(-grace)).
		Order("deadline_at ASC").Limit(int64(limit)).Scan(ctx)
	if err != nil {
		return nil, err
	}
	return s.claimedTasks(ctx, rows)
}

// PushTarget is a task attempt with where to push it.
type PushTarget struct {
	Task  courier.Task
	Queue courier.Queue
}

// MarkTaskPushed records that an attempt is about to be pushed, its deadline (now plus the
// processing time Temporal still allows it) and the workflow run it belongs to, if the task is
// still in Processing on that attempt; ok is false otherwise (the attempt is stale: cancelled,
// or an earlier run of the workflow already finished it). The run id is written in the same
// guarded update, so a cancel that commits after it knows exactly which run to cancel, and one
// that commits before it needs none (this push then finds the row cancelled).
func (s *Store) MarkTaskPushed(ctx context.Context, taskID string, version int64, attempt int, processingTimeout time.Duration, runID string) (PushTarget, bool, error) {
	var run any
	if runID != "" {
		run = runID
	}
	res, err := s.db.NewUpdate().Model((*taskRow)(nil)).Set("pushed_at = "+s.nowSQL()).
		Set("deadline_at = "+s.nowPlusSQL(processingTimeout)).Set("run_id = ?", run).
		Where("task_id = ? AND version = ? AND attempt = ? AND status = 'processing'", taskID, version, attempt).Exec(ctx)
	if err != nil {
		return PushTarget{}, false, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return PushTarget{}, false, nil
	}
	t, err := s.GetTask(ctx, taskID, version)
	if err != nil {
		return PushTarget{}, false, err
	}
	q, err := s.GetQueue(ctx, t.Queue)
	if err != nil {
		return PushTarget{}, false, err
	}
	return PushTarget{Task: t, Queue: t.Overrides.Apply(q)}, true, nil
}

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
		q, err := s.getQueue(ctx, tx, t.Queue, false)
		if err != nil {
			return err
		}
		q = t.Overrides.Apply(q)
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
		if _, err := tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight - 1 WHERE name = ?", t.Queue); err != nil {
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
		return s.notifyTasks(ctx, tx, t.Queue)
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
			if _, err := tx.ExecContext(ctx, "UPDATE courier_task_queues SET in_flight = in_flight - 1 WHERE name = ?", t.Queue); err != nil {
				return err
			}
			if err := s.notifyTasks(ctx, tx, t.Queue); err != nil {
				return err
			}
		}
		out, err = s.getTask(ctx, tx, taskID, version, false)
		return err
	})
	return out, wasProcessing, err
}

// --- sweeper ---

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

// LimiterRepair is one queue whose in_flight count did not match its rows in Processing.
type LimiterRepair struct {
	Queue    string
	Recorded int // in_flight before the repair
	Counted  int // rows in Processing
}

// ReconcileLimiters checks every queue's in_flight against its rows in Processing, under the
// queue's lock, and repairs any mismatch.
func (s *Store) ReconcileLimiters(ctx context.Context) ([]LimiterRepair, error) {
	queues, err := s.ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	var repairs []LimiterRepair
	for _, q := range queues {
		err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			locked, err := s.getQueue(ctx, tx, q.Name, true)
			if err != nil {
				return err
			}
			n, err := tx.NewSelect().Model((*taskRow)(nil)).Where("queue = ? AND status = 'processing'", q.Name).Count(ctx)
			if err != nil {
				return err
			}
			if int(n) == locked.InFlight {
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

// TaskStats are task counts for the metrics collector.
type TaskStats struct {
	ByQueueStatus map[string]map[courier.TaskStatus]int64
	InFlight      map[string]int64
	Limit         map[string]int64
}

// TaskStats counts tasks by queue and status, and reads every queue's slots.
func (s *Store) TaskStats(ctx context.Context) (TaskStats, error) {
	st := TaskStats{ByQueueStatus: map[string]map[courier.TaskStatus]int64{}, InFlight: map[string]int64{}, Limit: map[string]int64{}}
	var rows []struct {
		Queue  string `bun:"queue"`
		Status string `bun:"status"`
		N      int64  `bun:"n"`
	}
	if err := s.db.NewRaw("SELECT queue, status, count(*) AS n FROM courier_tasks GROUP BY queue, status").Scan(ctx, &rows); err != nil {
		return st, err
	}
	var queues []queueRow
	if err := s.db.NewSelect().Model(&queues).Scan(ctx); err != nil {
		return st, err
	}
	for _, q := range queues {
		st.ByQueueStatus[q.Name] = map[courier.TaskStatus]int64{}
		st.InFlight[q.Name] = int64(q.InFlight)
		st.Limit[q.Name] = int64(q.ConcurrencyLimit)
	}
	for _, r := range rows {
		if st.ByQueueStatus[r.Queue] == nil {
			st.ByQueueStatus[r.Queue] = map[courier.TaskStatus]int64{}
		}
		st.ByQueueStatus[r.Queue][courier.TaskStatus(r.Status)] = r.N
	}
	return st, nil
}
