package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/tracing"
)

// outboxRow is the bun model of courier_outbox (contract: docs/outbox.md).
type outboxRow struct {
	bun.BaseModel `bun:"table:courier_outbox"`

	ID            int64        `bun:"id,pk,autoincrement"`
	Topic         string       `bun:"topic"`
	Key           string       `bun:"key"`
	Payload       []byte       `bun:"payload"`
	Headers       *string      `bun:"headers"`
	Status        string       `bun:"status"`
	Attempts      int          `bun:"attempts"`
	NextAttemptAt time.Time    `bun:"next_attempt_at"`
	CreatedAt     time.Time    `bun:"created_at"`
	SentAt        bun.NullTime `bun:"sent_at"`
	LastError     *string      `bun:"last_error"`
	WorkflowID    *string      `bun:"workflow_id"`
	// IdempotencyKey and RequestHash are a record's written through the API with an
	// Idempotency-Key (EnqueueOutboxOnce); NULL otherwise.
	IdempotencyKey *string `bun:"idempotency_key"`
	RequestHash    *string `bun:"request_hash"`
	PayloadBytes   int     `bun:"payload_bytes,scanonly"`
}

func (r *outboxRow) record() courier.OutboxRecord {
	rec := courier.OutboxRecord{
		ID:            r.ID,
		Topic:         r.Topic,
		Key:           r.Key,
		Payload:       r.Payload,
		PayloadBytes:  len(r.Payload),
		Status:        courier.OutboxStatus(r.Status),
		Attempts:      r.Attempts,
		NextAttemptAt: r.NextAttemptAt.UTC(),
		CreatedAt:     r.CreatedAt.UTC(),
	}
	if r.Payload == nil {
		rec.PayloadBytes = r.PayloadBytes // a list that left the payload in the database
	}
	if !r.SentAt.IsZero() {
		t := r.SentAt.UTC()
		rec.SentAt = &t
	}
	if r.LastError != nil {
		rec.LastError = *r.LastError
	}
	if r.WorkflowID != nil {
		rec.WorkflowID = *r.WorkflowID
	} else {
		// No batch or key took the record: its own delivery did, if anything has (a claim or
		// an attempt), unless it is a row the relay handles itself without a workflow.
		taken := rec.Status != courier.OutboxPending || rec.Attempts > 0
		rec.OwnRun = taken && r.Topic != outbox.TimerTopic && r.Topic != outbox.TaskTopic
	}
	if r.Headers != nil && *r.Headers != "" {
		if err := json.Unmarshal([]byte(*r.Headers), &rec.Headers); err != nil {
			// A producer wrote the row by hand: show it, but never publish it.
			rec.Headers = nil
			rec.Malformed = "headers are not a JSON object of strings: " + err.Error()
		}
	}
	return rec
}

// ClaimedRecord is what the relay needs to start a delivery: the payload stays in the database,
// out of workflow history.
type ClaimedRecord struct {
	ID    int64
	Topic string
	// Attempts counts the row's delivery attempts so far: the relay batches only rows that have
	// had none (a row that failed in a batch, or was redriven, gets a delivery of its own).
	Attempts int
	// Trace is the W3C trace context in the row's headers (traceparent, tracestate), zero when
	// it has none or its headers do not parse: the delivery continues the producer's trace.
	Trace courier.TraceContext
}

// ClaimFilter narrows a claim (ClaimOutboxWhere). Its zero value claims every due row.
type ClaimFilter struct {
	// PausedTopics are topic patterns whose rows are left where they are: a paused pattern's
	// records are neither claimed nor touched (docs/flow-control.md). Patterns SQL cannot
	// match exactly (TopicPatternExact) are not applied here; the relay hands such rows back.
	PausedTopics []string
	// Ordered leaves out the rows of the ordered mode, which their keys' own deliveries take
	// in commit order (ClaimOrderedHead).
	Ordered courier.OrderedScope
}

// orderedSQL is the condition that a row (columns prefixed by alias, "" or "o.") is ordered.
func (s *Store) orderedSQL(alias string, o courier.OrderedScope) (string, []any) {
	if o.All {
		return "(" + alias + `"key" <> '')`, nil
	}
	cond, args, _ := s.anyTopicSQL(alias+"topic", o.Topics)
	return "(" + alias + `"key" <> '' AND ` + cond + ")", args
}

// ClaimOutbox claims up to limit due rows in one short transaction and returns them (see
// ClaimOutboxWhere).
func (s *Store) ClaimOutbox(ctx context.Context, limit int, lease time.Duration) ([]ClaimedRecord, error) {
	return s.ClaimOutboxWhere(ctx, limit, lease, ClaimFilter{})
}

// ClaimOutboxWhere claims up to limit due rows that f lets through, in one short transaction,
// and returns them. A due row
// is pending with next_attempt_at in the past, or dispatched whose lease has run out (its
// delivery may never have started if a relay crashed after claiming). Claimed rows become
// dispatched with next_attempt_at = now + lease; the caller then starts their deliveries,
// which is idempotent, outside any transaction. On PostgreSQL the rows are locked with
// FOR UPDATE SKIP LOCKED, so any number of relays claim disjoint rows without a leader or a
// cursor; on SQLite the immediate transaction serialises claims.
func (s *Store) ClaimOutboxWhere(ctx context.Context, limit int, lease time.Duration, f ClaimFilter) ([]ClaimedRecord, error) {
	var (
		extra string
		args  []any
	)
	var paused []string
	for _, p := range f.PausedTopics {
		if TopicPatternExact(p) {
			paused = append(paused, p)
		}
	}
	if len(paused) > 0 {
		cond, a, _ := s.anyTopicSQL("topic", paused)
		extra += " AND NOT " + cond
		args = append(args, a...)
	}
	if f.Ordered.On() {
		cond, a := s.orderedSQL("", f.Ordered)
		extra += " AND NOT " + cond
		args = append(args, a...)
	}
	pick := "SELECT id FROM courier_outbox WHERE status IN ('pending', 'dispatched')" +
		" AND next_attempt_at <= " + s.nowSQL() + extra + " ORDER BY next_attempt_at, id LIMIT ?"
	args = append(args, limit)
	// PostgreSQL: a MATERIALIZED CTE is evaluated once, so the claim can never exceed its
	// limit whatever plan the IN takes (see picked in tasks.go).
	with, in := "", "id IN ("+pick+")"
	if s.pg {
		with, in = "WITH picked AS MATERIALIZED ("+pick+" FOR UPDATE SKIP LOCKED) ", "id IN (SELECT id FROM picked)"
	}
	// workflow_id is cleared: a claimed record is the relay's again, and unless the relay hands
	// it to a batch (AssignOutboxRun) its own delivery takes it.
	q := with + "UPDATE courier_outbox SET status = 'dispatched', workflow_id = NULL, next_attempt_at = " + s.nowPlusSQL(lease) +
		" WHERE " + in + " RETURNING id, topic, headers, attempts"
	var recs []ClaimedRecord
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				r       ClaimedRecord
				headers sql.NullString
			)
			if err := rows.Scan(&r.ID, &r.Topic, &headers, &r.Attempts); err != nil {
				return err
			}
			r.Trace = traceOf(headers.String)
			recs = append(recs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
	return recs, nil
}

// traceOf reads the trace context from a row's headers JSON. Names match in any case; headers
// that are not a JSON object of strings have none (such a row goes dead on delivery anyway).
func traceOf(headers string) courier.TraceContext {
	if headers == "" {
		return courier.TraceContext{}
	}
	var h map[string]string
	if json.Unmarshal([]byte(headers), &h) != nil {
		return courier.TraceContext{}
	}
	return tracing.FromHeaders(h)
}

// AssignOutboxRun records the workflow that takes claimed (dispatched) records when it is not
// their own delivery: their batch's, written before the batch starts, so GET /v1/outbox/{id}
// names the run that is delivering them. An empty workflowID clears it (the batch could not be
// started).
func (s *Store) AssignOutboxRun(ctx context.Context, ids []int64, workflowID string) error {
	if len(ids) == 0 {
		return nil
	}
	var run *string
	if workflowID != "" {
		run = &workflowID
	}
	_, err := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("workflow_id = ?", run).
		Where("id IN (?)", bun.List(ids)).
		Where("status = ?", courier.OutboxDispatched).
		Exec(ctx)
	return err
}

// ReleaseOutbox hands claimed rows whose delivery could not be started back to pending, due
// again after retryIn.
func (s *Store) ReleaseOutbox(ctx context.Context, ids []int64, retryIn time.Duration) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("status = ?", courier.OutboxPending).
		Set("next_attempt_at = "+s.nowPlusSQL(retryIn)).
		Where("id IN (?)", bun.List(ids)).
		Where("status = ?", courier.OutboxDispatched).
		Exec(ctx)
	return err
}

// GetOutbox returns one record, or an error with code not_found.
func (s *Store) GetOutbox(ctx context.Context, id int64) (courier.OutboxRecord, error) {
	var row outboxRow
	err := s.db.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return courier.OutboxRecord{}, courier.Errorf(courier.CodeNotFound, "outbox record %d not found", id)
	}
	if err != nil {
		return courier.OutboxRecord{}, err
	}
	return row.record(), nil
}

// DefaultPayloadBudget is the payload bytes one page of ListOutbox may load unless the filter
// sets another budget (courier.OutboxFilter.PayloadBudget).
const DefaultPayloadBudget = 4 << 20

// ListOutbox lists records by filter, a bounded page at a time, and reports whether more
// records match after the last one returned.
func (s *Store) ListOutbox(ctx context.Context, f courier.OutboxFilter) ([]courier.OutboxRecord, bool, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 1000)
	if f.PayloadBudget <= 0 {
		f.PayloadBudget = DefaultPayloadBudget
	}
	filtered := func(q *bun.SelectQuery) *bun.SelectQuery {
		q = q.Where("id > ?", f.AfterID).Order("id ASC")
		if f.Status != "" {
			q = q.Where("status = ?", f.Status)
		}
		if f.Topic != "" {
			q = q.Where("topic = ?", f.Topic)
		}
		return q
	}
	// One row more than the page tells whether another page follows. Payloads stay in the
	// database at this step; only their sizes are read.
	var rows []outboxRow
	err := filtered(s.db.NewSelect().Model(&rows).ExcludeColumn("payload").
		ColumnExpr(s.payloadBytesSQL() + " AS payload_bytes")).Limit(int64(f.Limit) + 1).Scan(ctx)
	if err != nil {
		return nil, false, err
	}
	more := len(rows) > f.Limit
	rows = rows[:min(len(rows), f.Limit)]
	if f.WithPayload && len(rows) > 0 {
		var used int64
		for i := range rows {
			if used += int64(rows[i].PayloadBytes); used > f.PayloadBudget && i > 0 {
				rows, more = rows[:i], true
				break
			}
		}
		if rows, err = s.withPayloads(ctx, rows); err != nil {
			return nil, false, err
		}
	}
	out := make([]courier.OutboxRecord, 0, len(rows))
	for i := range rows {
		out = append(out, rows[i].record())
	}
	return out, more, nil
}

// withPayloads reloads rows with their payloads, in the same order. A row deleted meanwhile
// (sent rows age out) drops out of the page.
func (s *Store) withPayloads(ctx context.Context, rows []outboxRow) ([]outboxRow, error) {
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	var full []outboxRow
	if err := s.db.NewSelect().Model(&full).Where("id IN (?)", bun.List(ids)).Order("id ASC").Scan(ctx); err != nil {
		return nil, err
	}
	return full, nil
}

// payloadBytesSQL is the size in bytes of a row's payload, however the producer stored it.
func (s *Store) payloadBytesSQL() string {
	if s.pg {
		return "octet_length(payload)"
	}
	return "length(CAST(payload AS BLOB))"
}

// RecordOutboxAttempt counts one failed delivery attempt and keeps its error, so operators see
// progress while Temporal retries. next_attempt_at moves to the estimated retry time but never
// earlier than it already is: a dispatched row must not become due for re-claiming while its
// workflow is merely waiting to retry.
func (s *Store) RecordOutboxAttempt(ctx context.Context, id int64, lastErr string, retryIn time.Duration) error {
	_, err := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("attempts = attempts + 1").
		Set("last_error = ?", lastErr).
		Set("next_attempt_at = "+s.greatestSQL("next_attempt_at", s.nowPlusSQL(retryIn))).
		Where("id = ?", id).
		Exec(ctx)
	return err
}

// MarkOutboxStarted records that the delivery workflows of claimed rows have started: they are
// not due again until horizon has passed, when any relay re-ensures that their workflow still
// exists (an idempotent start). Without it every started row would be re-claimed each lease.
func (s *Store) MarkOutboxStarted(ctx context.Context, ids []int64, horizon time.Duration) error {
	return s.markOutboxStarted(ctx, ids, "", horizon)
}

// MarkOutboxBatchStarted is MarkOutboxStarted for a started batch's records: it moves only
// those still dispatched under the batch's workflow id, so a late mark never touches a record a
// later claim has taken again (the claim clears workflow_id).
func (s *Store) MarkOutboxBatchStarted(ctx context.Context, ids []int64, workflowID string, horizon time.Duration) error {
	return s.markOutboxStarted(ctx, ids, workflowID, horizon)
}

// markOutboxStarted moves the dispatched records among ids (only those under workflowID, when
// it is set) to horizon from now.
func (s *Store) markOutboxStarted(ctx context.Context, ids []int64, workflowID string, horizon time.Duration) error {
	if len(ids) == 0 {
		return nil
	}
	q := s.db.NewUpdate().Model((*outboxRow)(nil)).
		Set("next_attempt_at = "+s.nowPlusSQL(horizon)).
		Where("id IN (?)", bun.List(ids)).
		Where("status = ?", courier.OutboxDispatched)
	if workflowID != "" {
		q = q.Where("workflow_id = ?", workflowID)
	}
	_, err := q.Exec(ctx)
	return err
}

// MarkOutboxSent marks a record sent and counts the successful attempt. It returns false if the
// record was not pending or dispatched (already sent, or dead), which makes a repeated delivery
// harmless.
func (s *Store) MarkOutboxSent(ctx context.Context, id int64) (bool, error) {
	return s.updateUnsent(ctx, id, func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("status = ?", courier.OutboxSent).
			Set("attempts = attempts + 1").
			Set("sent_at = " + s.nowSQL())
	})
}

// unsentStatuses are the statuses of a record not yet sent or dead.
var unsentStatuses = []courier.OutboxStatus{courier.OutboxPending, courier.OutboxDispatched}

// updateUnsent applies set to a record still unsent; false when it was not (sent or dead
// meanwhile, or unknown), so a repeated or late update changes nothing.
func (s *Store) updateUnsent(ctx context.Context, id int64, set func(*bun.UpdateQuery) *bun.UpdateQuery) (bool, error) {
	res, err := set(s.db.NewUpdate().Model((*outboxRow)(nil))).
		Where("id = ?", id).
		Where("status IN (?)", bun.List(unsentStatuses)).
		Exec(ctx)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// MarkOutboxDead marks a record dead with its last error, unless it was sent meanwhile. A
// dead record's next_attempt_at becomes the time it went dead (bulk redrive filters on it).
func (s *Store) MarkOutboxDead(ctx context.Context, id int64, lastErr string) (bool, error) {
	return s.updateUnsent(ctx, id, func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("status = ?", courier.OutboxDead).
			Set("last_error = ?", lastErr).
			Set("next_attempt_at = " + s.nowSQL())
	})
}

// RedriveOutbox moves a dead record back to pending so the relay delivers it again. A record
// that is not dead is a conflict; an unknown id is not_found.
func (s *Store) RedriveOutbox(ctx context.Context, id int64) (courier.OutboxRecord, error) {
	var out courier.OutboxRecord
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var row outboxRow
		q := tx.NewSelect().Model(&row).Where("id = ?", id)
		if s.pg {
			q = q.For("UPDATE")
		}
		if err := q.Scan(ctx); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return courier.Errorf(courier.CodeNotFound, "outbox record %d not found", id)
			}
			return err
		}
		if row.Status != string(courier.OutboxDead) {
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("outbox record %d is %s; only dead records can be redriven", id, row.Status),
				Details: map[string]any{"status": row.Status}}
		}
		if _, err := tx.NewUpdate().Model((*outboxRow)(nil)).
			Set("status = ?", courier.OutboxPending).
			Set("next_attempt_at = "+s.nowSQL()).
			Where("id = ?", id).Exec(ctx); err != nil {
			return err
		}
		// A record a key waits on unblocks it: pending again, it goes out first.
		if err := unblockRecords(ctx, tx, []int64{id}); err != nil {
			return err
		}
		if err := tx.NewSelect().Model(&row).Where("id = ?", id).Scan(ctx); err != nil {
			return err
		}
		out = row.record()
		return nil
	})
	return out, err
}

// OutboxStats summarises the table for metrics.
type OutboxStats struct {
	ByStatus     map[courier.OutboxStatus]int64
	OldestUnsent *time.Time // created_at of the oldest pending or dispatched row
	BlockedKeys  int64      // ordered keys waiting on a dead record
}

// OutboxStats counts rows by status and finds the oldest unsent row.
func (s *Store) OutboxStats(ctx context.Context) (OutboxStats, error) {
	st := OutboxStats{ByStatus: map[courier.OutboxStatus]int64{}}
	var rows []struct {
		Status string `bun:"status"`
		N      int64  `bun:"n"`
	}
	if err := s.db.NewSelect().TableExpr("courier_outbox").ColumnExpr("status, count(*) AS n").
		Group("status").Scan(ctx, &rows); err != nil {
		return st, err
	}
	for _, r := range rows {
		st.ByStatus[courier.OutboxStatus(r.Status)] = r.N
	}
	n, err := s.CountBlockedKeys(ctx)
	if err != nil {
		return st, err
	}
	st.BlockedKeys = n
	var oldest outboxRow
	err = s.db.NewSelect().Model(&oldest).Column("created_at").
		Where("status IN (?)", bun.List(unsentStatuses)).
		Order("id ASC").Limit(1).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return st, err
	default:
		t := oldest.CreatedAt.UTC()
		st.OldestUnsent = &t
	}
	return st, nil
}

// DeleteSentOutbox deletes up to limit sent rows sent before the cutoff, keeping the hot table
// small; callers loop until it returns fewer than limit.
func (s *Store) DeleteSentOutbox(ctx context.Context, before time.Time, limit int) (int64, error) {
	sub := s.db.NewSelect().Model((*outboxRow)(nil)).Column("id").
		Where("status = ?", courier.OutboxSent).Where("sent_at < ?", before.UTC()).
		Order("id ASC").Limit(int64(limit))
	res, err := s.db.NewDelete().Model((*outboxRow)(nil)).Where("id IN (?)", sub).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// EnqueueOutbox inserts one message in its own transaction (for the gateway's publish endpoint;
// producers with a database use outbox.Enqueue inside their own transaction instead). It goes
// through outbox.Enqueue, so the message is checked and written (store/outboxsql) exactly as a
// producer's would be.
func (s *Store) EnqueueOutbox(ctx context.Context, m outbox.Message) (courier.OutboxRecord, error) {
	var rec courier.OutboxRecord
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		ids, err := outbox.Enqueue(ctx, tx, m)
		if err != nil {
			return err
		}
		var row outboxRow
		if err := tx.NewSelect().Model(&row).Where("id = ?", ids[0]).Scan(ctx); err != nil {
			return err
		}
		rec = row.record()
		return nil
	})
	return rec, err
}

// EnqueueOutboxOnce writes one outbox record as EnqueueOutbox does, under an idempotency key
// (the API's Idempotency-Key) and the hash of the request that asked for it: the first request
// with the key writes the record (created); a repeat with the same hash, while the record is
// kept, answers the record it wrote (not created); a repeat with another hash is a conflict and
// writes nothing. Two concurrent requests with one key write one record: the unique index
// makes the second wait for the first and then find its record.
func (s *Store) EnqueueOutboxOnce(ctx context.Context, m outbox.Message, key, hash string) (rec courier.OutboxRecord, created bool, err error) {
	if err := m.Validate(); err != nil {
		return courier.OutboxRecord{}, false, err
	}
	var headers any
	if len(m.Headers) > 0 {
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return courier.OutboxRecord{}, false, err
		}
		headers = string(b)
	}
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		created = false
		var ids []int64
		err := tx.NewRaw(`INSERT INTO courier_outbox (topic, "key", payload, headers, idempotency_key, request_hash) VALUES (?, ?, ?, ?, ?, ?) `+
			`ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`,
			m.Topic, m.Key, []byte(m.Payload), headers, key, hash).Scan(ctx, &ids)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var row outboxRow
		q := tx.NewSelect().Model(&row)
		if len(ids) == 1 {
			created = true
			q = q.Where("id = ?", ids[0])
		} else {
			q = q.Where("idempotency_key = ?", key)
		}
		if err := q.Scan(ctx); err != nil {
			return err
		}
		if !created && (row.RequestHash == nil || *row.RequestHash != hash) {
			return &courier.Error{Code: courier.CodeConflict,
				Message: fmt.Sprintf("Idempotency-Key %q was used for another request (outbox record %d): a retry must repeat the request unchanged, a new request needs a new key", key, row.ID),
				Details: map[string]any{"id": row.ID}}
		}
		rec = row.record()
		return nil
	})
	return rec, created, err
}

// HoldOutbox hands a record whose topic is paused back to pending, due again after retryIn,
// without counting an attempt: a delivery that finds its topic paused publishes nothing, and
// the claims leave the record alone until the topic is resumed. A record already sent or dead
// is left alone (false).
func (s *Store) HoldOutbox(ctx context.Context, id int64, retryIn time.Duration) (bool, error) {
	return s.updateUnsent(ctx, id, func(q *bun.UpdateQuery) *bun.UpdateQuery {
		return q.Set("status = ?", courier.OutboxPending).
			Set("next_attempt_at = " + s.nowPlusSQL(retryIn))
	})
}
