package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// The task code is split by role: this file holds the task tables and the SQL helpers the
// roles share; task_queues.go the queue configuration and stats, task_insert.go the
// version-rule insert, task_read.go the reads, task_claim.go the claim and the push,
// task_finish.go finishing and cancelling an attempt, task_sweep.go the sweeper's steps.

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
	q, err := decodeQueue([]byte(r.Config))
	if err != nil {
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
	Key           string       `bun:"concurrency_key"`
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
	HeartbeatMS   int64        `bun:"heartbeat_timeout_ms"` // the current attempt's heartbeat timeout
	BatchID       *string      `bun:"batch_id"`             // the batch run pushing the current attempt (batched mode)
	TimeoutAt     bun.NullTime `bun:"timeout_at"`           // when a batched attempt times out unless heard from
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
		TaskID: r.TaskID, Version: r.Version, Queue: r.Queue, Priority: r.Priority, ConcurrencyKey: r.Key,
		Status: courier.TaskStatus(r.Status), Payload: json.RawMessage(r.Payload),
		Attempt: r.Attempt, Attempts: r.Attempt - r.AttemptBase, StatusCode: r.StatusCode, Message: r.Message,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(), NextAttemptAt: r.NextAttemptAt.UTC(),
		ExpiresAt: nullTime(r.ExpiresAt), ClaimedAt: nullTime(r.ClaimedAt), PushedAt: nullTime(r.PushedAt), DeadlineAt: nullTime(r.DeadlineAt),
		FinishedAt: nullTime(r.FinishedAt),
	}
	if r.Result != nil {
		t.Result = json.RawMessage(*r.Result)
	}
	if r.RunID != nil {
		t.RunID = *r.RunID
	}
	if r.BatchID != nil {
		t.Batch = *r.BatchID
	}
	t.AttemptHeartbeatTimeout = time.Duration(r.HeartbeatMS) * time.Millisecond
	if r.TraceParent != nil {
		t.Trace.Parent = *r.TraceParent
	}
	if r.TraceState != nil {
		t.Trace.State = *r.TraceState
	}
	var err error
	if t.Overrides, err = decodeOverrides([]byte(r.Overrides)); err != nil {
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
