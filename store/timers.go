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

// timerRow is a timer's row (courier_timers, migrations 0011 and 0017): a bucketed timer, or
// the row that decides a timer of its own (mode 'workflow').
type timerRow struct {
	bun.BaseModel `bun:"table:courier_timers"`

	BizType     string       `bun:"biz_type,pk"`
	BizID       string       `bun:"biz_id,pk"`
	FireAt      time.Time    `bun:"fire_at"`
	Bucket      int64        `bun:"bucket"`
	State       string       `bun:"state"`
	Mode        string       `bun:"mode"`
	Payload     string       `bun:"payload"`
	RequestHash string       `bun:"request_hash"`
	Version     int          `bun:"version"`
	Attempts    int          `bun:"attempts"`
	LastError   string       `bun:"last_error"`
	Claim       *string      `bun:"claim"`
	DeliveryID  string       `bun:"delivery_id"`
	TraceParent *string      `bun:"traceparent"`
	TraceState  *string      `bun:"tracestate"`
	CreatedAt   time.Time    `bun:"created_at"`
	UpdatedAt   time.Time    `bun:"updated_at"`
	FinishedAt  bun.NullTime `bun:"finished_at"`
	ScheduleID  *string      `bun:"schedule_id"`
	ScheduleVer int          `bun:"schedule_version"`
	// RowRef is the row's ctid on PostgreSQL, read only by a claim (claimedColumns): the claim's
	// transaction changes its rows again by it.
	RowRef string `bun:"row_ref,scanonly"`
}

func (r *timerRow) record() courier.TimerRecord {
	rec := courier.TimerRecord{
		BizType: r.BizType, BizID: r.BizID, FireAt: r.FireAt.UTC(), State: courier.TimerState(r.State), Mode: courier.TimerMode(r.Mode),
		Payload: []byte(r.Payload), RequestHash: r.RequestHash, Version: r.Version, Attempts: r.Attempts,
		LastError: r.LastError, DeliveryID: r.DeliveryID, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		FinishedAt: nullTime(r.FinishedAt),
	}
	if r.ScheduleID != nil {
		rec.ScheduleID = *r.ScheduleID
	}
	if r.TraceParent != nil {
		rec.Trace.Parent = *r.TraceParent
	}
	if r.TraceState != nil {
		rec.Trace.State = *r.TraceState
	}
	return rec
}

func records(rows []timerRow) []courier.TimerRecord {
	out := make([]courier.TimerRecord, len(rows))
	for i := range rows {
		out[i] = rows[i].record()
	}
	return out
}

// timerColumns are the columns a timer is read with.
const timerColumns = "biz_type, biz_id, fire_at, bucket, state, mode, payload, request_hash, version, attempts, last_error, " +
	"claim, delivery_id, traceparent, tracestate, created_at, updated_at, finished_at, schedule_id, schedule_version"

// claimedColumns are the columns a claim reads its rows back with: on PostgreSQL also their
// row ids, by which the claim's transaction cancels the ones it does not deliver (a TID scan:
// looked up by key among a type's timers, with statistics that lag a burst of inserts, the
// planner scanned every timer of the type, seconds for a batch of 1,000).
func (s *Store) claimedColumns() string {
	if s.pg {
		return timerColumns + ", ctid::text AS row_ref"
	}
	return timerColumns
}

// MaxTimerBatch bounds the timers one call inserts: a batch is one statement.
const MaxTimerBatch = 1000

// InsertTimers stores timers in one transaction: each record is created, or found already there
// (a repeat when its RequestHash matches, a conflict otherwise, whatever its mode). Records
// carry their fire time (truncated to milliseconds), mode (bucketed when empty), payload,
// request hash and trace; their state is scheduled. Nothing is half-written: either every new
// record is stored or none.
func (s *Store) InsertTimers(ctx context.Context, recs []courier.TimerRecord) ([]courier.TimerInsert, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	if len(recs) > MaxTimerBatch {
		return nil, fmt.Errorf("store: %d timers in one insert, at most %d", len(recs), MaxTimerBatch)
	}
	out := make([]courier.TimerInsert, len(recs))
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		values := make([]string, 0, len(recs))
		args := make([]any, 0, len(recs)*8)
		for _, r := range recs {
			fire := r.FireAt.UTC().Truncate(time.Millisecond)
			mode := r.Mode
			if mode == "" {
				mode = courier.TimerModeBucketed
			}
			values = append(values, "(?, ?, ?, ?, 'scheduled', ?, ?, ?, ?, ?, "+s.nowSQL()+", "+s.nowSQL()+")")
			args = append(args, r.BizType, r.BizID, s.timeArg(fire), courier.TimerBucket(fire), string(mode), string(r.Payload), r.RequestHash,
				nullString(r.Trace.Parent), nullString(r.Trace.State))
		}
		var created []timerRow
		err := tx.NewRaw("INSERT INTO courier_timers (biz_type, biz_id, fire_at, bucket, state, mode, payload, request_hash, "+
			"traceparent, tracestate, created_at, updated_at) VALUES "+strings.Join(values, ", ")+
			" ON CONFLICT (biz_type, biz_id) DO NOTHING RETURNING "+timerColumns, args...).Scan(ctx, &created)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		byKey := map[courier.TimerKey]*timerRow{}
		for i := range created {
			byKey[courier.TimerKey{BizType: created[i].BizType, BizID: created[i].BizID}] = &created[i]
		}
		var missing []courier.TimerKey
		for _, r := range recs {
			if k := (courier.TimerKey{BizType: r.BizType, BizID: r.BizID}); byKey[k] == nil {
				missing = append(missing, k)
			}
		}
		existing, err := s.timersByKey(ctx, tx, missing)
		if err != nil {
			return err
		}
		for i, r := range recs {
			k := courier.TimerKey{BizType: r.BizType, BizID: r.BizID}
			if row := byKey[k]; row != nil {
				out[i] = courier.TimerInsert{Record: row.record(), Created: true}
				delete(byKey, k) // a key twice in one batch: the second is the first's repeat
				existing[k] = row
				continue
			}
			row := existing[k]
			if row == nil {
				return fmt.Errorf("store: timer %s/%s neither inserted nor found", r.BizType, r.BizID)
			}
			out[i] = courier.TimerInsert{Record: row.record(), Conflict: row.RequestHash != r.RequestHash}
		}
		return nil
	})
	return out, err
}

// timersByKey reads the timers of keys.
func (s *Store) timersByKey(ctx context.Context, db bun.IDB, keys []courier.TimerKey) (map[courier.TimerKey]*timerRow, error) {
	out := map[courier.TimerKey]*timerRow{}
	if len(keys) == 0 {
		return out, nil
	}
	conds := make([]string, len(keys))
	args := make([]any, 0, 2*len(keys))
	for i, k := range keys {
		conds[i] = "(biz_type = ? AND biz_id = ?)"
		args = append(args, k.BizType, k.BizID)
	}
	var rows []timerRow
	err := db.NewRaw("SELECT "+timerColumns+" FROM courier_timers WHERE "+strings.Join(conds, " OR "), args...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	for i := range rows {
		out[courier.TimerKey{BizType: rows[i].BizType, BizID: rows[i].BizID}] = &rows[i]
	}
	return out, nil
}

func timerNotFound(bizType, bizID string) error {
	return courier.Errorf(courier.CodeNotFound, "no timer %s/%s", bizType, bizID)
}

// GetTimerRecord returns one bucketed timer, or not_found.
func (s *Store) GetTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, error) {
	rows, err := s.timersByKey(ctx, s.db, []courier.TimerKey{{BizType: bizType, BizID: bizID}})
	if err != nil {
		return courier.TimerRecord{}, err
	}
	for _, r := range rows {
		return r.record(), nil
	}
	return courier.TimerRecord{}, timerNotFound(bizType, bizID)
}

// updateScheduled applies set to the timer if it is still scheduled and returns it as it is
// afterwards; changed says whether set applied (false: the timer had fired or was cancelled,
// and is returned as it is).
func (s *Store) updateScheduled(ctx context.Context, bizType, bizID, set string, args ...any) (courier.TimerRecord, bool, error) {
	return s.updateTimerIf(ctx, bizType, bizID, "state = 'scheduled' AND schedule_id IS NULL", set, args...)
}

// redeliverSet clears a failed timer's attempts and error for a new delivery.
const redeliverSet = "attempts = 0, last_error = '', claim = NULL, delivery_id = '', finished_at = NULL"

// updateTimerIf applies set to the timer, its version bumped, if it matches cond, and returns
// it as it is afterwards; changed says whether set applied (false: the timer is returned as it
// is).
func (s *Store) updateTimerIf(ctx context.Context, bizType, bizID, cond, set string, args ...any) (courier.TimerRecord, bool, error) {
	var rows []timerRow
	err := s.db.NewRaw("UPDATE courier_timers SET "+set+", version = version + 1, updated_at = "+s.nowSQL()+
		" WHERE biz_type = ? AND biz_id = ? AND "+cond+" RETURNING "+timerColumns,
		append(args, bizType, bizID)...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return courier.TimerRecord{}, false, err
	}
	if len(rows) == 1 {
		return rows[0].record(), true, nil
	}
	rec, err := s.GetTimerRecord(ctx, bizType, bizID)
	return rec, false, err
}

// CancelTimerRecord cancels a scheduled bucketed timer. A cancel that returns changed is
// final: the timer's delivery claims only scheduled rows, so it can never fire afterwards.
// A timer already firing, delivered, failed or cancelled is returned as it is.
func (s *Store) CancelTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error) {
	return s.updateScheduled(ctx, bizType, bizID, "state = 'cancelled', finished_at = "+s.nowSQL())
}

// RescheduleTimerRecord moves a scheduled bucketed timer to fireAt (and its bucket). A timer
// no longer scheduled is returned as it is, with changed false.
func (s *Store) RescheduleTimerRecord(ctx context.Context, bizType, bizID string, fireAt time.Time) (courier.TimerRecord, bool, error) {
	fire := fireAt.UTC().Truncate(time.Millisecond)
	return s.updateScheduled(ctx, bizType, bizID, "fire_at = ?, bucket = ?", s.timeArg(fire), courier.TimerBucket(fire))
}

// ClaimDueTimers claims up to limit of bizType's bucketed timers that are due (fire_at at or
// before the database's clock) in bucket or an earlier one, oldest first: they become firing,
// their attempts counted and marked with claim. A claim is idempotent: while rows marked with
// claim are still firing (the delivery that claimed them ended before it finished them, or
// ReserveDueTimers took them for it), they are returned again instead of new ones, so a
// delivery retried after a crash delivers the same timers; a reserved timer's attempt is
// counted here, when its delivery takes it. Timers cancelled first are never claimed; timers
// claimed first cannot be cancelled.
func (s *Store) ClaimDueTimers(ctx context.Context, bizType string, bucket int64, claim string, limit int) ([]courier.TimerRecord, error) {
	recs, _, err := s.claimDueTimers(ctx, bizType, bucket, claim, limit, true)
	return recs, err
}

// ReserveDueTimers claims bizType's due bucketed timers for claim as ClaimDueTimers does, but
// counts no attempt, and says how many it holds. The bucket reserves a batch on courier's
// workflow queue before its delivery waits on the business type's queue, so its timers read
// firing (no longer cancellable, no attempt made) while a pause of the type holds the delivery;
// ClaimDueTimers under the same claim then takes exactly these and counts their attempt.
//
// A claim that takes triggers of wheel schedules writes their next triggers in its
// transaction (followSchedules); it returns the buckets those wait in, for the caller to arm
// (the sweep arms any it does not).
func (s *Store) ReserveDueTimers(ctx context.Context, bizType string, bucket int64, claim string, limit int) (int, []courier.TimerBucketRef, error) {
	recs, next, err := s.claimDueTimers(ctx, bizType, bucket, claim, limit, false)
	return len(recs), next, err
}

func (s *Store) claimDueTimers(ctx context.Context, bizType string, bucket int64, claim string, limit int, count bool) ([]courier.TimerRecord, []courier.TimerBucketRef, error) {
	var rows []timerRow
	var next []courier.TimerBucketRef
	attempts := "attempts"
	if count {
		attempts = "attempts + 1"
	}
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		held := "SELECT " + timerColumns + " FROM courier_timers WHERE claim = ? AND state = 'firing'"
		if count {
			// Reserved, not yet taken by a delivery: its first attempt starts now. (A bucketed
			// timer has made no attempt while it is scheduled, so 0 means reserved.) One
			// statement counts the attempt and reads the rows back.
			held = "UPDATE courier_timers SET attempts = CASE WHEN attempts = 0 THEN 1 ELSE attempts END " +
				"WHERE claim = ? AND state = 'firing' RETURNING " + timerColumns
		}
		err := tx.NewRaw(held, claim).Scan(ctx, &rows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if len(rows) > 0 {
			return nil
		}
		// Arguments by index: the pick runs before the update on PostgreSQL and inside it on
		// SQLite.
		// Ordered as the due index is (a bucket is its timers' second, so this is fire_at order):
		// the pick reads the index's first rows instead of sorting every due timer. Timers of
		// their own (mode 'workflow') are their runs' to claim, also in a type that was switched
		// to buckets.
		pick := "SELECT biz_type, biz_id FROM courier_timers WHERE biz_type = ?2 AND bucket <= ?3 AND state = 'scheduled'" +
			" AND mode = 'bucketed' AND fire_at <= " + s.nowSQL() + " ORDER BY bucket, fire_at LIMIT ?4"
		with, in := "", "(biz_type, biz_id) IN ("+pick+")"
		if s.pg {
			// The picked rows are updated by their row ids (a TID scan): joined by key, a
			// table without statistics yet (a burst just inserted) was planned as a scan of
			// every due timer per picked one, 40 s for a batch of 1,000 out of 100,000.
			pickIDs := strings.Replace(pick, "SELECT biz_type, biz_id FROM", "SELECT ctid FROM", 1)
			with, in = "WITH picked AS MATERIALIZED ("+pickIDs+" FOR UPDATE SKIP LOCKED) ",
				"ctid = ANY(ARRAY(SELECT ctid FROM picked))"
		}
		// The delivery id (claim/biz_id) is the same for every try of this delivery, and new for
		// a redelivery.
		err = tx.NewRaw(with+"UPDATE courier_timers SET state = 'firing', claim = ?0, delivery_id = ?1 || biz_id, "+
			"attempts = "+attempts+", updated_at = "+s.nowSQL()+" WHERE "+in+" AND state = 'scheduled' RETURNING "+s.claimedColumns(),
			claim, claim+"/", bizType, bucket, limit).Scan(ctx, &rows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		rows, next, err = s.followSchedules(ctx, tx, rows)
		return err
	})
	return records(rows), next, err
}

// NextDueTimer is the fire time of bizType's earliest scheduled bucketed timer in bucket or an
// earlier one; ok is false when there is none.
func (s *Store) NextDueTimer(ctx context.Context, bizType string, bucket int64) (at time.Time, ok bool, err error) {
	var rows []timerRow
	err = s.db.NewRaw("SELECT "+timerColumns+" FROM courier_timers WHERE biz_type = ? AND bucket <= ? AND state = 'scheduled' AND mode = 'bucketed'"+
		" ORDER BY bucket, fire_at LIMIT 1", bizType, bucket).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, err
	}
	if len(rows) == 0 {
		return time.Time{}, false, nil
	}
	return rows[0].FireAt.UTC(), true, nil
}

// TimerOutcome is how one claimed timer's bucket delivery ended.
type TimerOutcome struct {
	BizID     string
	Delivered bool
	// LastError is why the delivery failed; the timer then stays firing, handed to a run of its
	// own that retries it (or, with Failed, fails it for good).
	LastError string
	Failed    bool // the failure is final: no retry can change it
}

// handedClaim marks a firing timer whose own run has been started: it is that run's to end.
const handedClaim = "handed"

// FinishTimerClaim records how claim's deliveries ended and lets go of the claim: delivered
// timers are delivered; failed ones keep firing with their error, handed to the runs of their
// own that the caller started for them (RecordTimerResult ends them).
func (s *Store) FinishTimerClaim(ctx context.Context, bizType, claim string, outcomes []TimerOutcome) error {
	var delivered []string
	failed := map[string]string{}
	for _, o := range outcomes {
		if o.Delivered {
			delivered = append(delivered, o.BizID)
		} else {
			failed[o.BizID] = o.LastError
		}
	}
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if len(delivered) > 0 {
			// On PostgreSQL the claim's rows are found by their claim (its index) first: matched
			// by type and key, the planner, with statistics that lag a burst of inserts, read
			// every timer of the type for each batch (claimedColumns).
			of := ""
			if s.pg {
				of = "ctid = ANY(ARRAY(SELECT ctid FROM courier_timers WHERE claim = ?1)) AND "
			}
			_, err := tx.NewRaw("UPDATE courier_timers SET state = 'delivered', claim = NULL, last_error = '', finished_at = "+
				s.nowSQL()+", updated_at = "+s.nowSQL()+" WHERE "+of+"biz_type = ?0 AND claim = ?1 AND biz_id IN (?2)",
				bizType, claim, bun.List(delivered)).Exec(ctx)
			if err != nil {
				return err
			}
		}
		for id, msg := range failed {
			_, err := tx.NewRaw("UPDATE courier_timers SET claim = ?, last_error = ?, updated_at = "+s.nowSQL()+
				" WHERE biz_type = ? AND biz_id = ? AND claim = ?", handedClaim, msg, bizType, id, claim).Exec(ctx)
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// RecordTimerResult ends a firing bucketed timer: delivered, or failed with its last error,
// after attempts in all. A timer that is not firing (a repeat of the call) is left as it is;
// ok says whether this call ended it.
func (s *Store) RecordTimerResult(ctx context.Context, bizType, bizID string, state courier.TimerState, attempts int, lastError string) (bool, error) {
	if state != courier.TimerDelivered && state != courier.TimerFailed {
		return false, fmt.Errorf("store: a timer ends delivered or failed, not %s", state)
	}
	res, err := s.db.NewRaw("UPDATE courier_timers SET state = ?, attempts = ?, last_error = ?, claim = NULL, finished_at = "+
		s.nowSQL()+", updated_at = "+s.nowSQL()+" WHERE biz_type = ? AND biz_id = ? AND state = 'firing'",
		string(state), attempts, lastError, bizType, bizID).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// MarkTimerHanded records that a firing timer's own run was started (after a redelivery, or by
// the sweep of stranded timers), so the sweep leaves it to that run.
func (s *Store) MarkTimerHanded(ctx context.Context, bizType, bizID string) error {
	_, err := s.db.NewRaw("UPDATE courier_timers SET claim = ? WHERE biz_type = ? AND biz_id = ? AND state = 'firing' AND claim IS NULL",
		handedClaim, bizType, bizID).Exec(ctx)
	return err
}

// RedeliverTimerRecord makes a failed bucketed timer firing again, its attempts and error
// cleared and its version bumped, for a new delivery: the caller starts its run and marks it
// handed (MarkTimerHanded); until then StrandedTimers finds it. A timer that is not failed is
// returned as it is, with ok false.
func (s *Store) RedeliverTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error) {
	return s.updateTimerIf(ctx, bizType, bizID, "state = 'failed' AND mode = 'bucketed'", "state = 'firing', "+redeliverSet)
}

// MaxTimerPage bounds one page of a timer list.
const MaxTimerPage = 1000

// ListTimerRecords returns one page of the bucketed timers f selects, newest first (by
// creation, then key, descending), and whether another page follows.
func (s *Store) ListTimerRecords(ctx context.Context, f courier.TimerFilter) ([]courier.TimerRecord, bool, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxTimerPage {
		limit = 100
	}
	var conds []string
	var args []any
	add := func(cond string, a ...any) { conds, args = append(conds, cond), append(args, a...) }
	if f.BizType != "" {
		add("biz_type = ?", f.BizType)
	}
	if f.State != "" {
		add("state = ?", string(f.State))
	}
	if !f.FinishedAfter.IsZero() {
		add("finished_at >= ?", s.timeArg(f.FinishedAfter))
	}
	if !f.FinishedBefore.IsZero() {
		add("finished_at < ?", s.timeArg(f.FinishedBefore))
	}
	if c := f.After; c != nil {
		at := s.timeArg(c.CreatedAt)
		add("(created_at < ? OR (created_at = ? AND biz_type < ?) OR (created_at = ? AND biz_type = ? AND biz_id < ?))",
			at, at, c.BizType, at, c.BizType, c.BizID)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	var rows []timerRow
	err := s.db.NewRaw("SELECT "+timerColumns+" FROM courier_timers"+where+
		" ORDER BY created_at DESC, biz_type DESC, biz_id DESC LIMIT ?", append(args, limit+1)...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, false, err
	}
	more := len(rows) > limit
	return records(rows[:min(len(rows), limit)]), more, nil
}

// OverdueTimerBuckets lists up to limit buckets holding timers still scheduled although they
// fell due more than grace ago: their bucket's workflow never ran (a crash between a timer's
// insert and its bucket's start) or ended before they were due. Starting those buckets'
// workflows delivers them.
func (s *Store) OverdueTimerBuckets(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerBucketRef, error) {
	var rows []struct {
		BizType string `bun:"biz_type"`
		Bucket  int64  `bun:"bucket"`
	}
	err := s.db.NewRaw("SELECT DISTINCT biz_type, bucket FROM courier_timers WHERE state = 'scheduled' AND mode = 'bucketed' AND fire_at < "+
		s.nowPlusSQL(-grace)+" ORDER BY bucket LIMIT ?", limit).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	out := make([]courier.TimerBucketRef, len(rows))
	for i, r := range rows {
		out[i] = courier.TimerBucketRef{BizType: r.BizType, Bucket: r.Bucket}
	}
	return out, nil
}

// StrandedTimers lists up to limit bucketed timers that have been firing without a claim for
// longer than grace: redelivered, but their run was never started (a crash between the two).
// Starting their runs delivers them.
func (s *Store) StrandedTimers(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerRecord, error) {
	var rows []timerRow
	err := s.db.NewRaw("SELECT "+timerColumns+" FROM courier_timers WHERE state = 'firing' AND claim IS NULL AND mode = 'bucketed' AND updated_at <= "+
		s.nowPlusSQL(-grace)+" ORDER BY updated_at LIMIT ?", limit).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return records(rows), nil
}

// PurgeTimerRecords deletes up to limit of bizType's finished timers (delivered, failed,
// cancelled) that finished more than retention ago, and returns how many it deleted.
func (s *Store) PurgeTimerRecords(ctx context.Context, bizType string, retention time.Duration, limit int) (int64, error) {
	res, err := s.db.NewRaw("DELETE FROM courier_timers WHERE (biz_type, biz_id) IN (SELECT biz_type, biz_id FROM courier_timers"+
		" WHERE biz_type = ? AND state IN ('delivered', 'failed', 'cancelled') AND finished_at < "+s.nowPlusSQL(-retention)+
		" LIMIT ?)", bizType, limit).Exec(ctx)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// CountTimerRecords counts bucketed timers by business type and state (for metrics).
func (s *Store) CountTimerRecords(ctx context.Context) (map[string]map[courier.TimerState]int64, error) {
	var rows []struct {
		BizType string `bun:"biz_type"`
		State   string `bun:"state"`
		N       int64  `bun:"n"`
	}
	err := s.db.NewRaw("SELECT biz_type, state, COUNT(*) AS n FROM courier_timers GROUP BY biz_type, state").Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	out := map[string]map[courier.TimerState]int64{}
	for _, r := range rows {
		if out[r.BizType] == nil {
			out[r.BizType] = map[courier.TimerState]int64{}
		}
		out[r.BizType][courier.TimerState(r.State)] = r.N
	}
	return out, nil
}
