package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// The batched dispatch mode (docs/tasks.md, "Dispatch modes"): a batch run pushes many
// attempts, and an attempt's deadline and heartbeat timeout are kept in its row (timeout_at),
// checked every second by the claimers (ExpireTimedOutAttempts).

// BatchAttempt is one attempt a batch run pushes, with the timeouts it runs under.
type BatchAttempt struct {
	TaskID            string
	Version           int64
	Attempt           int
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration // 0: none
	// Pushing is how long the push's first try may take: an attempt's heartbeat timeout runs
	// from the worker's answer (StartBatchedHeartbeats), so until then its timeout_at leaves
	// the try this much beyond the heartbeat timeout.
	Pushing time.Duration
}

// batchChunk bounds the rows one statement of the batched mode names.
const batchChunk = 500

// MarkBatchPushed records that batch is about to push its attempts: each one still in
// Processing on that attempt and still the batch's gets pushed_at, its processing deadline
// (now plus its processing timeout) and timeout_at (the deadline, or, when sooner, now plus
// the push's first try and the heartbeat timeout: the heartbeat timeout runs once the worker
// has the attempt, StartBatchedHeartbeats), all kept from an earlier push of the same attempt
// (a repeated push after a crash never moves a deadline earlier or later). It returns those tasks with their payloads;
// the others have moved on (a result, a cancel, a timeout) and are not to be pushed.
func (s *Store) MarkBatchPushed(ctx context.Context, batch string, attempts []BatchAttempt) ([]courier.Task, error) {
	var out []courier.Task
	for start := 0; start < len(attempts); start += batchChunk {
		chunk := attempts[start:min(start+batchChunk, len(attempts))]
		var values strings.Builder
		args := make([]any, 0, 5*len(chunk)+1)
		for i, a := range chunk {
			if i > 0 {
				values.WriteString(", ")
			}
			values.WriteString("(?, ?, ?, ?, ?, ?)")
			args = append(args, a.TaskID, a.Version, a.Attempt, a.ProcessingTimeout.Milliseconds(), a.HeartbeatTimeout.Milliseconds(),
				a.Pushing.Milliseconds())
		}
		args = append(args, batch)
		deadline := s.nowPlusMillisSQL("v.ms")
		timeout := "CASE WHEN v.hb > 0 AND v.hb + v.pushing < v.ms THEN " + s.nowPlusMillisSQL("(v.hb + v.pushing)") + " ELSE " + deadline + " END"
		returning := "*" // SQLite's RETURNING names only the updated table's columns, and no TABLE.* wildcard
		if s.pg {
			returning = "courier_tasks.*"
		}
		var rows []taskRow
		err := s.db.NewRaw("WITH v(task_id, version, attempt, ms, hb, pushing) AS (VALUES "+values.String()+") "+
			"UPDATE courier_tasks SET pushed_at = COALESCE(courier_tasks.pushed_at, "+s.nowSQL()+"), "+
			"deadline_at = COALESCE(courier_tasks.deadline_at, "+deadline+"), "+
			"timeout_at = COALESCE(courier_tasks.timeout_at, "+timeout+"), "+
			"heartbeat_timeout_ms = v.hb, updated_at = "+s.nowSQL()+" FROM v "+
			"WHERE courier_tasks.task_id = v.task_id AND courier_tasks.version = v.version AND courier_tasks.attempt = v.attempt "+
			"AND courier_tasks.status = 'processing' AND courier_tasks.batch_id = ? RETURNING "+returning, args...).Scan(ctx, &rows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		ts, err := tasksOf(rows, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

// nowPlusMillisSQL is the database's current time plus the milliseconds the SQL expression ms
// holds, in the column layout of the dialect.
func (s *Store) nowPlusMillisSQL(ms string) string {
	if s.pg {
		return "(clock_timestamp() + make_interval(secs => " + ms + " / 1000.0))"
	}
	return "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '+' || (" + ms + " / 1000.0) || ' seconds')"
}

// ReportedResult is a worker's result for one attempt, as FinishReportedMany takes it.
type ReportedResult struct {
	TaskID  string
	Version int64
	Attempt int
	Outcome contract.AttemptOutcome // success or failure
}

// FinishReportedMany is FinishReported for many results in one transaction, the slots they free
// all held under hold: the successes in one statement, each failure on its own (it reads its
// queue's retry policy). It returns a FinishResult per result, in order; a result whose task
// is gone has the zero FinishResult (Status "").
func (s *Store) FinishReportedMany(ctx context.Context, results []ReportedResult, hold string) ([]FinishResult, error) {
	if hold == "" {
		return nil, fmt.Errorf("store: FinishReportedMany needs a hold id")
	}
	out := make([]FinishResult, len(results))
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		clear(out)
		var succ []int
		for i, r := range results {
			if r.Outcome.Kind == courier.OutcomeSuccess {
				succ = append(succ, i)
			}
		}
		held := map[string]int{}
		for start := 0; start < len(succ); start += batchChunk {
			if err := s.finishSuccesses(ctx, tx, results, succ[start:min(start+batchChunk, len(succ))], out, held); err != nil {
				return err
			}
		}
		for q, n := range held {
			if err := s.holdSlots(ctx, tx, hold, q, n); err != nil {
				return err
			}
		}
		queues := map[string]courier.Queue{}
		var unapplied []int
		for i, r := range results {
			if r.Outcome.Kind == courier.OutcomeSuccess {
				if !out[i].Applied {
					unapplied = append(unapplied, i)
				}
				continue
			}
			t, err := s.getTask(ctx, tx, r.TaskID, r.Version, true)
			if courier.ErrorCode(err) == courier.CodeNotFound {
				continue
			}
			if err != nil {
				return err
			}
			if out[i], err = s.finishLocked(ctx, tx, t, r.Attempt, r.Outcome, hold, queues); err != nil {
				return err
			}
		}
		// Successes not written: read where their tasks are (a repeat finds its own success).
		for start := 0; start < len(unapplied); start += batchChunk {
			if err := s.whereAre(ctx, tx, results, unapplied[start:min(start+batchChunk, len(unapplied))], out); err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// finishSuccesses records the successes results[idx] in one statement, guarded as one finish
// is, setting out[i] for those written and counting their slots by queue in held.
func (s *Store) finishSuccesses(ctx context.Context, tx bun.Tx, results []ReportedResult, idx []int, out []FinishResult, held map[string]int) error {
	var values strings.Builder
	args := make([]any, 0, 6*len(idx))
	for n, i := range idx {
		if n > 0 {
			values.WriteString(", ")
		}
		r := results[i]
		var result any
		if len(r.Outcome.Result) > 0 && string(r.Outcome.Result) != "null" {
			result = string(r.Outcome.Result)
		}
		values.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, r.TaskID, r.Version, r.Attempt, result, r.Outcome.StatusCode, r.Outcome.Message)
	}
	var rows []taskRow
	// The first row's casts name the columns' types for PostgreSQL (a VALUES list of NULLs
	// and strings has no type otherwise).
	err := tx.NewRaw("WITH v(task_id, version, attempt, result, status_code, message) AS (VALUES "+s.typedValues(values.String())+") "+
		"UPDATE courier_tasks SET status = 'success', result = v.result, status_code = v.status_code, message = v.message, "+
		"finished_at = "+s.nowSQL()+", updated_at = "+s.nowSQL()+", timeout_at = NULL FROM v "+
		"WHERE courier_tasks.task_id = v.task_id AND courier_tasks.version = v.version AND courier_tasks.attempt = v.attempt "+
		"AND courier_tasks.status = 'processing' RETURNING courier_tasks.task_id, courier_tasks.version, courier_tasks.queue, "+
		"courier_tasks.batch_id, courier_tasks.run_id, courier_tasks.heartbeat_timeout_ms, courier_tasks.pushed_at, "+
		"courier_tasks.traceparent, courier_tasks.tracestate", args...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	type key struct {
		id string
		v  int64
	}
	done := make(map[key]*taskRow, len(rows))
	for j := range rows {
		r := &rows[j]
		done[key{r.TaskID, r.Version}] = r
		held[r.Queue]++
	}
	for _, i := range idx {
		r, ok := done[key{results[i].TaskID, results[i].Version}]
		if !ok {
			continue
		}
		fr := FinishResult{Applied: true, Recorded: true, Status: courier.TaskSuccess, Queue: r.Queue, PushedAt: nullTime(r.PushedAt),
			Run: AttemptRun{HeartbeatTimeout: time.Duration(r.HeartbeatMS) * time.Millisecond}}
		if r.BatchID != nil {
			fr.Batch = *r.BatchID
		}
		if r.RunID != nil {
			fr.Run.ID = *r.RunID
		}
		if r.TraceParent != nil {
			fr.Trace.Parent = *r.TraceParent
		}
		if r.TraceState != nil {
			fr.Trace.State = *r.TraceState
		}
		out[i] = fr
	}
	return nil
}

// typedValues casts the first row of a VALUES list of (text, bigint, int, text, int, text)
// on PostgreSQL, which infers the columns' types from it.
func (s *Store) typedValues(values string) string {
	if !s.pg {
		return values
	}
	return strings.Replace(values, "(?, ?, ?, ?, ?, ?)", "(?::text, ?::bigint, ?::int, ?::text, ?::int, ?::text)", 1)
}

// whereAre fills out[i] for results[idx] that were not written: where each task is now, and
// whether it holds that very success (a repeat).
func (s *Store) whereAre(ctx context.Context, tx bun.Tx, results []ReportedResult, idx []int, out []FinishResult) error {
	var cond strings.Builder
	args := make([]any, 0, 2*len(idx))
	for n, i := range idx {
		if n > 0 {
			cond.WriteString(", ")
		}
		cond.WriteString("(?, ?)")
		args = append(args, results[i].TaskID, results[i].Version)
	}
	var rows []struct {
		TaskID  string `bun:"task_id"`
		Version int64  `bun:"version"`
		Status  string `bun:"status"`
		Attempt int    `bun:"attempt"`
		Queue   string `bun:"queue"`
	}
	err := tx.NewRaw("SELECT task_id, version, status, attempt, queue FROM courier_tasks WHERE (task_id, version) IN ("+cond.String()+")",
		args...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	for _, i := range idx {
		for _, r := range rows {
			if r.TaskID == results[i].TaskID && r.Version == results[i].Version {
				status := courier.TaskStatus(r.Status)
				out[i] = FinishResult{Recorded: holdsSuccess(status, r.Attempt, results[i].Attempt), Status: status, Queue: r.Queue}
			}
		}
	}
	return nil
}

// Expired says how an expiry pass ended attempts.
type Expired struct {
	Attempts int            // attempts timed out
	ByQueue  map[string]int // of those, per queue
}

// ExpireTimedOutAttempts ends up to limit batched attempts whose timeout_at has passed, by the
// database's clock (never early): each as a timeout (the heartbeat's when its last heartbeat
// ran out before the deadline, the processing deadline's otherwise), its slot released and
// the queue's retry policy applied, as the per-attempt mode's run does at its deadline. Rows
// another transaction holds are skipped on PostgreSQL (another claimer is on them, or their
// result is being written).
func (s *Store) ExpireTimedOutAttempts(ctx context.Context, limit int) (Expired, error) {
	out := Expired{ByQueue: map[string]int{}}
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		out = Expired{ByQueue: map[string]int{}}
		sel := "SELECT * FROM courier_tasks WHERE status = 'processing' AND timeout_at IS NOT NULL AND timeout_at <= " + s.nowSQL() +
			" ORDER BY timeout_at LIMIT ?"
		if s.pg {
			sel += " FOR UPDATE SKIP LOCKED"
		}
		var rows []taskRow
		if err := tx.NewRaw(sel, limit).Scan(ctx, &rows); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		queues := map[string]courier.Queue{}
		for i := range rows {
			t, err := rows[i].task()
			if err != nil {
				return err
			}
			fr, err := s.finishLocked(ctx, tx, t, t.Attempt, contract.AttemptOutcome{Kind: courier.OutcomeTimeout, Message: timeoutMessage(rows[i])}, "", queues)
			if err != nil {
				return err
			}
			if fr.Applied {
				out.Attempts++
				out.ByQueue[t.Queue]++
			}
		}
		return nil
	})
	return out, err
}

// timeoutMessage says which timeout ended a batched attempt.
func timeoutMessage(r taskRow) string {
	if r.HeartbeatMS > 0 && r.TimeoutAt.Before(r.DeadlineAt.Time) {
		return fmt.Sprintf("heartbeat timeout: no heartbeat for %s", time.Duration(r.HeartbeatMS)*time.Millisecond)
	}
	if r.PushedAt.IsZero() || r.DeadlineAt.IsZero() {
		return "processing timeout: no result before the deadline"
	}
	return fmt.Sprintf("processing timeout: no result within %s", r.DeadlineAt.Sub(r.PushedAt.Time).Round(time.Second))
}

// AttemptKey names one attempt of one task.
type AttemptKey struct {
	TaskID  string
	Version int64
	Attempt int
}

// StartBatchedHeartbeats starts the heartbeat timeouts of batched attempts: each one still in
// Processing on that attempt, with a heartbeat timeout, gets timeout_at now plus its heartbeat
// timeout plus after (never past its processing deadline). The push calls it with after zero
// once the worker has answered (the timeout runs from the worker's answer, as a heartbeat's
// does), and with the wait and the next try's bound before it tries a request again (no
// heartbeat timeout runs out while courier is still pushing). Attempts without one are left
// alone: their timeout_at is their deadline.
func (s *Store) StartBatchedHeartbeats(ctx context.Context, attempts []AttemptKey, after time.Duration) error {
	least := "min"
	if s.pg {
		least = "least"
	}
	for start := 0; start < len(attempts); start += batchChunk {
		chunk := attempts[start:min(start+batchChunk, len(attempts))]
		var cond strings.Builder
		args := make([]any, 0, 3*len(chunk))
		for i, a := range chunk {
			if i > 0 {
				cond.WriteString(", ")
			}
			cond.WriteString("(?, ?, ?)")
			args = append(args, a.TaskID, a.Version, a.Attempt)
		}
		after := strconv.FormatInt(after.Milliseconds(), 10)
		_, err := s.db.ExecContext(ctx, "UPDATE courier_tasks SET timeout_at = "+least+"(deadline_at, "+
			s.nowPlusMillisSQL("(heartbeat_timeout_ms + "+after+")")+") "+
			"WHERE (task_id, version, attempt) IN ("+cond.String()+") AND status = 'processing' AND timeout_at IS NOT NULL "+
			"AND heartbeat_timeout_ms > 0", args...)
		if err != nil {
			return err
		}
	}
	return nil
}

// MoveBatchedAttempts hands batched attempts from batch from to batch to (a run that tries
// their request again, contract.PushBatchParams.Try): each one still in Processing on that
// attempt and still from's becomes to's, and one with a heartbeat timeout gets timeout_at now
// plus its heartbeat timeout plus after (the wait and the next try), never past its deadline.
// It returns how many moved.
func (s *Store) MoveBatchedAttempts(ctx context.Context, from, to string, attempts []AttemptKey, after time.Duration) (int, error) {
	least := "min"
	if s.pg {
		least = "least"
	}
	moved := 0
	for start := 0; start < len(attempts); start += batchChunk {
		chunk := attempts[start:min(start+batchChunk, len(attempts))]
		var cond strings.Builder
		args := []any{to}
		for i, a := range chunk {
			if i > 0 {
				cond.WriteString(", ")
			}
			cond.WriteString("(?, ?, ?)")
			args = append(args, a.TaskID, a.Version, a.Attempt)
		}
		args = append(args, from)
		after := strconv.FormatInt(after.Milliseconds(), 10)
		res, err := s.db.ExecContext(ctx, "UPDATE courier_tasks SET batch_id = ?, timeout_at = CASE WHEN heartbeat_timeout_ms > 0 THEN "+
			least+"(deadline_at, "+s.nowPlusMillisSQL("(heartbeat_timeout_ms + "+after+")")+") ELSE timeout_at END "+
			"WHERE (task_id, version, attempt) IN ("+cond.String()+") AND status = 'processing' AND batch_id = ? AND timeout_at IS NOT NULL", args...)
		if err != nil {
			return moved, err
		}
		n, _ := res.RowsAffected()
		moved += int(n)
	}
	return moved, nil
}

// BeatBatchedAttempt records a heartbeat of a batched attempt with a heartbeat timeout: its
// timeout_at moves to now plus the heartbeat timeout (never past the processing deadline).
// ok is false when the task is not in Processing on that attempt (its status is then given).
func (s *Store) BeatBatchedAttempt(ctx context.Context, taskID string, version int64, attempt int) (ok bool, status courier.TaskStatus, err error) {
	least := "min"
	if s.pg {
		least = "least"
	}
	res, err := s.db.ExecContext(ctx, "UPDATE courier_tasks SET timeout_at = "+least+"(deadline_at, "+s.nowPlusMillisSQL("heartbeat_timeout_ms")+") "+
		"WHERE task_id = ? AND version = ? AND attempt = ? AND status = 'processing' AND timeout_at IS NOT NULL AND heartbeat_timeout_ms > 0",
		taskID, version, attempt)
	if err != nil {
		return false, "", err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, courier.TaskProcessing, nil
	}
	t, err := s.GetTask(ctx, taskID, version)
	if err != nil {
		return false, "", err
	}
	return t.Status == courier.TaskProcessing && t.Attempt == attempt, t.Status, nil
}
