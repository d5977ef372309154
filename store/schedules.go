package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/courier-oss/courier"
)

// scheduleRow is a schedule that rides the timer wheel (courier_schedules, migration 0018).
type scheduleRow struct {
	bun.BaseModel `bun:"table:courier_schedules"`

	ID         string    `bun:"id,pk"`
	BizType    string    `bun:"biz_type"`
	Cron       string    `bun:"cron"`
	IntervalMS int64     `bun:"interval_ms"`
	TimeZone   string    `bun:"time_zone"`
	JitterMS   int64     `bun:"jitter_ms"`
	CatchupMS  int64     `bun:"catchup_ms"`
	Payload    string    `bun:"payload"`
	Spec       string    `bun:"spec"`
	Paused     bool      `bun:"paused"`
	Note       string    `bun:"note"`
	Version    int       `bun:"version"`
	CreatedAt  time.Time `bun:"created_at"`
	UpdatedAt  time.Time `bun:"updated_at"`
}

const scheduleColumns = "id, biz_type, cron, interval_ms, time_zone, jitter_ms, catchup_ms, payload, spec, paused, note, version, created_at, updated_at"

func (r *scheduleRow) record() courier.ScheduleRecord {
	return courier.ScheduleRecord{
		ID: r.ID, BizType: r.BizType,
		Timing: courier.ScheduleTiming{Cron: r.Cron, Interval: time.Duration(r.IntervalMS) * time.Millisecond, TimeZone: r.TimeZone,
			Jitter: time.Duration(r.JitterMS) * time.Millisecond},
		CatchupWindow: time.Duration(r.CatchupMS) * time.Millisecond, Payload: []byte(r.Payload), Spec: []byte(r.Spec),
		Paused: r.Paused, Note: r.Note, Version: r.Version, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func scheduleNotFound(id string) error {
	return courier.Errorf(courier.CodeNotFound, "no schedule %q", id)
}

// CreateScheduleRecord stores a wheel schedule and, unless it is paused, its first trigger: the
// first fire time after now. An id already stored is a conflict. It returns the schedule and
// the bucket its trigger waits in (nil when paused), which the caller arms.
func (s *Store) CreateScheduleRecord(ctx context.Context, rec courier.ScheduleRecord, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error) {
	timing, err := rec.Timing.Compile()
	if err != nil {
		return courier.ScheduleRecord{}, nil, err
	}
	var out courier.ScheduleRecord
	var bucket *courier.TimerBucketRef
	err = s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var rows []scheduleRow
		err := tx.NewRaw("INSERT INTO courier_schedules (id, biz_type, cron, interval_ms, time_zone, jitter_ms, catchup_ms, payload, spec, "+
			"paused, note, version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, "+s.nowSQL()+", "+s.nowSQL()+
			") ON CONFLICT (id) DO NOTHING RETURNING "+scheduleColumns,
			rec.ID, rec.BizType, rec.Timing.Cron, rec.Timing.Interval.Milliseconds(), rec.Timing.TimeZone, rec.Timing.Jitter.Milliseconds(),
			rec.CatchupWindow.Milliseconds(), string(rec.Payload), string(rec.Spec), rec.Paused, rec.Note).Scan(ctx, &rows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if len(rows) == 0 {
			return courier.Errorf(courier.CodeConflict, "schedule %q already exists; PATCH it instead", rec.ID)
		}
		out = rows[0].record()
		if out.Paused {
			return nil
		}
		bucket, err = s.armNextTrigger(ctx, tx, out, timing, now)
		return err
	})
	return out, bucket, err
}

// armNextTrigger writes rec's trigger for its first fire time after now.
func (s *Store) armNextTrigger(ctx context.Context, tx bun.Tx, rec courier.ScheduleRecord, timing courier.CompiledTiming, now time.Time) (*courier.TimerBucketRef, error) {
	nominal := timing.Next(now)
	if nominal.IsZero() {
		return nil, nil
	}
	refs, err := s.insertTriggers(ctx, tx, []trigger{{sch: rec, bizID: courier.ScheduleTriggerID(rec.ID, nominal),
		fireAt: timing.FireAt(rec.ID, nominal), version: rec.Version}})
	if err != nil || len(refs) == 0 {
		return nil, err
	}
	return &refs[0], nil
}

// trigger is one trigger row to write.
type trigger struct {
	sch     courier.ScheduleRecord
	bizID   string
	fireAt  time.Time
	version int
}

// insertTriggers writes triggers as scheduled bucketed timers. A trigger whose key was written
// before and cancelled (a pause, an update, a missed catch-up) is scheduled again; one that
// fired is left as it is, so a (schedule, fire time) fires once. It returns the buckets written.
func (s *Store) insertTriggers(ctx context.Context, tx bun.Tx, ts []trigger) ([]courier.TimerBucketRef, error) {
	var refs []courier.TimerBucketRef
	seen := map[courier.TimerBucketRef]bool{}
	for chunk := range slices.Chunk(ts, 500) {
		values := make([]string, 0, len(chunk))
		args := make([]any, 0, len(chunk)*8)
		for _, t := range chunk {
			fire := t.fireAt.UTC().Truncate(time.Millisecond)
			values = append(values, "(?, ?, ?, ?, 'scheduled', 'bucketed', ?, '', ?, ?, "+s.nowSQL()+", "+s.nowSQL()+")")
			args = append(args, t.sch.BizType, t.bizID, s.timeArg(fire), courier.TimerBucket(fire), string(t.sch.Payload), t.sch.ID, t.version)
			ref := courier.TimerBucketRef{BizType: t.sch.BizType, Bucket: courier.TimerBucket(fire)}
			if !seen[ref] {
				seen[ref] = true
				refs = append(refs, ref)
			}
		}
		_, err := tx.NewRaw("INSERT INTO courier_timers (biz_type, biz_id, fire_at, bucket, state, mode, payload, request_hash, "+
			"schedule_id, schedule_version, created_at, updated_at) VALUES "+strings.Join(values, ", ")+
			" ON CONFLICT (biz_type, biz_id) DO UPDATE SET state = 'scheduled', fire_at = excluded.fire_at, bucket = excluded.bucket, "+
			"payload = excluded.payload, schedule_version = excluded.schedule_version, attempts = 0, last_error = '', claim = NULL, "+
			"finished_at = NULL, updated_at = excluded.updated_at WHERE courier_timers.state = 'cancelled'", args...).Exec(ctx)
		if err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// cancelTriggers cancels the schedule's triggers still scheduled. On PostgreSQL a trigger a
// claim holds at this moment is skipped: it is firing already, and the claim, which then waits
// for this transaction's lock on the schedule's row, sees the change and acts on it.
func (s *Store) cancelTriggers(ctx context.Context, tx bun.Tx, id, why string) error {
	in := "schedule_id = ? AND state = 'scheduled'"
	if s.pg {
		in = "ctid = ANY(ARRAY(SELECT ctid FROM courier_timers WHERE schedule_id = ? AND state = 'scheduled' FOR UPDATE SKIP LOCKED))"
	}
	_, err := tx.NewRaw("UPDATE courier_timers SET state = 'cancelled', last_error = ?, finished_at = "+s.nowSQL()+", updated_at = "+
		s.nowSQL()+" WHERE "+in, why, id).Exec(ctx)
	return err
}

// changeSchedule applies set to the schedule's row (its version goes up), cancels its
// scheduled triggers and, unless it is paused afterwards, writes the trigger for its next fire
// time after now. It returns the schedule as it is afterwards and the bucket of the trigger.
func (s *Store) changeSchedule(ctx context.Context, id string, now time.Time, why, set string, args ...any) (courier.ScheduleRecord, *courier.TimerBucketRef, error) {
	var out courier.ScheduleRecord
	var bucket *courier.TimerBucketRef
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var rows []scheduleRow
		err := tx.NewRaw("UPDATE courier_schedules SET "+set+", version = version + 1, updated_at = "+s.nowSQL()+
			" WHERE id = ? RETURNING "+scheduleColumns, append(args, id)...).Scan(ctx, &rows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if len(rows) == 0 {
			return scheduleNotFound(id)
		}
		out = rows[0].record()
		if err := s.cancelTriggers(ctx, tx, id, why); err != nil {
			return err
		}
		if out.Paused {
			return nil
		}
		timing, err := out.Timing.Compile()
		if err != nil {
			return err
		}
		bucket, err = s.armNextTrigger(ctx, tx, out, timing, now)
		return err
	})
	return out, bucket, err
}

// UpdateScheduleRecord replaces a wheel schedule's business type, timing, catch-up window,
// payload and spec; it stays paused if it was (or becomes paused if rec says so). Its pending
// trigger is replaced by the one for the new timing's next fire time after now.
func (s *Store) UpdateScheduleRecord(ctx context.Context, rec courier.ScheduleRecord, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error) {
	if _, err := rec.Timing.Compile(); err != nil {
		return courier.ScheduleRecord{}, nil, err
	}
	return s.changeSchedule(ctx, rec.ID, now, "replaced by an update",
		"biz_type = ?, cron = ?, interval_ms = ?, time_zone = ?, jitter_ms = ?, catchup_ms = ?, payload = ?, spec = ?, paused = (paused OR ?)",
		rec.BizType, rec.Timing.Cron, rec.Timing.Interval.Milliseconds(), rec.Timing.TimeZone, rec.Timing.Jitter.Milliseconds(),
		rec.CatchupWindow.Milliseconds(), string(rec.Payload), string(rec.Spec), rec.Paused)
}

// PauseScheduleRecord pauses a wheel schedule: its pending trigger is cancelled, and a trigger
// a claim holds while this commits is not delivered (the claim sees the pause). Once this
// returns, no trigger of the schedule is claimed until it is unpaused.
func (s *Store) PauseScheduleRecord(ctx context.Context, id, note string) (courier.ScheduleRecord, error) {
	out, _, err := s.changeSchedule(ctx, id, time.Time{}, "paused", "paused = ?, note = ?", true, note)
	return out, err
}

// UnpauseScheduleRecord resumes a wheel schedule from its next fire time after now (fire times
// that passed while it was paused are not caught up).
func (s *Store) UnpauseScheduleRecord(ctx context.Context, id, note string, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error) {
	return s.changeSchedule(ctx, id, now, "unpaused", "paused = ?, note = ?", false, note)
}

// DeleteScheduleRecord deletes a wheel schedule and cancels its pending trigger; a trigger a
// claim holds while this commits is not delivered. Triggers already claimed before finish.
func (s *Store) DeleteScheduleRecord(ctx context.Context, id string) error {
	return s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw("DELETE FROM courier_schedules WHERE id = ?", id).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return scheduleNotFound(id)
		}
		return s.cancelTriggers(ctx, tx, id, "schedule deleted")
	})
}

// TriggerScheduleRecord writes a trigger of a wheel schedule due now (also when it is
// paused), beside its regular ones; it writes no next one.
func (s *Store) TriggerScheduleRecord(ctx context.Context, id string, now time.Time) (courier.TimerBucketRef, error) {
	var ref courier.TimerBucketRef
	now = now.UTC().Truncate(time.Millisecond) // as the row keeps it
	err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		rec, err := s.scheduleByID(ctx, tx, id)
		if err != nil {
			return err
		}
		refs, err := s.insertTriggers(ctx, tx, []trigger{{sch: rec, bizID: courier.ScheduleManualTriggerID(id, now), fireAt: now}})
		if err != nil {
			return err
		}
		ref = refs[0]
		return nil
	})
	return ref, err
}

func (s *Store) scheduleByID(ctx context.Context, db bun.IDB, id string) (courier.ScheduleRecord, error) {
	var rows []scheduleRow
	err := db.NewRaw("SELECT "+scheduleColumns+" FROM courier_schedules WHERE id = ?", id).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return courier.ScheduleRecord{}, err
	}
	if len(rows) == 0 {
		return courier.ScheduleRecord{}, scheduleNotFound(id)
	}
	return rows[0].record(), nil
}

// GetScheduleRecord returns a wheel schedule, or not_found.
func (s *Store) GetScheduleRecord(ctx context.Context, id string) (courier.ScheduleRecord, error) {
	return s.scheduleByID(ctx, s.db, id)
}

// MaxSchedulePage bounds one page of a schedule list.
const MaxSchedulePage = 1000

// ListScheduleRecords returns one page of the wheel schedules f selects, by id, and whether
// another page follows.
func (s *Store) ListScheduleRecords(ctx context.Context, f courier.ScheduleFilter) ([]courier.ScheduleRecord, bool, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxSchedulePage {
		limit = 100
	}
	var conds []string
	var args []any
	if f.BizType != "" {
		conds, args = append(conds, "biz_type = ?"), append(args, f.BizType)
	}
	if f.Paused != nil {
		conds, args = append(conds, "paused = ?"), append(args, *f.Paused)
	}
	if f.After != "" {
		conds, args = append(conds, "id > ?"), append(args, f.After)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	var rows []scheduleRow
	err := s.db.NewRaw("SELECT "+scheduleColumns+" FROM courier_schedules"+where+" ORDER BY id LIMIT ?", append(args, limit+1)...).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, false, err
	}
	more := len(rows) > limit
	rows = rows[:min(len(rows), limit)]
	out := make([]courier.ScheduleRecord, len(rows))
	for i := range rows {
		out[i] = rows[i].record()
	}
	return out, more, nil
}

// ScheduleTriggerStats reads a wheel schedule's triggers.
func (s *Store) ScheduleTriggerStats(ctx context.Context, id string) (courier.ScheduleTriggers, error) {
	var out courier.ScheduleTriggers
	var counts []struct {
		State     string `bun:"state"`
		LastError string `bun:"last_error"`
		N         int    `bun:"n"`
	}
	err := s.db.NewRaw("SELECT state, last_error, COUNT(*) AS n FROM courier_timers WHERE schedule_id = ? GROUP BY state, last_error", id).Scan(ctx, &counts)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return out, err
	}
	for _, c := range counts {
		switch {
		case c.State == string(courier.TimerCancelled) && c.LastError == courier.ScheduleMissedError:
			out.Missed += c.N
		case c.State == string(courier.TimerCancelled), c.State == string(courier.TimerScheduled):
		default:
			out.Runs += c.N
		}
	}
	var rows []timerRow
	err = s.db.NewRaw("SELECT "+timerColumns+" FROM courier_timers WHERE schedule_id = ? AND state = 'scheduled' AND schedule_version > 0 ORDER BY fire_at LIMIT 1", id).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return out, err
	}
	if len(rows) == 1 {
		at := rows[0].FireAt.UTC()
		out.Next = &at
		out.NextNominal, _ = time.Parse(time.RFC3339Nano, rows[0].BizID[strings.LastIndexByte(rows[0].BizID, '@')+1:])
	}
	rows = nil
	err = s.db.NewRaw("SELECT "+timerColumns+" FROM courier_timers WHERE schedule_id = ? AND state IN ('firing', 'delivered', 'failed') "+
		"ORDER BY fire_at DESC LIMIT 10", id).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return out, err
	}
	for _, r := range rows {
		out.Recent = append(out.Recent, r.FireAt.UTC())
	}
	return out, nil
}

// followSchedules is the claim's part for triggers of wheel schedules, in the claim's
// transaction: a trigger of a schedule deleted or paused (also by a change committed while
// the claim ran: the schedule's row is read under a lock its change holds) is cancelled, not
// delivered; so is one found past its schedule's catch-up window. A trigger of the schedule's
// current version writes the next one (the first fire time after it, or, after a downtime
// longer than the window, the first within the window). It returns the rows to deliver and
// the buckets the next triggers wait in.
func (s *Store) followSchedules(ctx context.Context, tx bun.Tx, rows []timerRow) ([]timerRow, []courier.TimerBucketRef, error) {
	var ids []string
	for _, r := range rows {
		if r.ScheduleID != nil {
			ids = append(ids, *r.ScheduleID)
		}
	}
	if len(ids) == 0 {
		return rows, nil, nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	lock := ""
	if s.pg {
		lock = " FOR SHARE"
	}
	schedules := map[string]courier.ScheduleRecord{}
	timings := map[string]courier.CompiledTiming{}
	for chunk := range slices.Chunk(ids, 1000) {
		var srows []scheduleRow
		err := tx.NewRaw("SELECT "+scheduleColumns+" FROM courier_schedules WHERE id IN (?) ORDER BY id"+lock, bun.List(chunk)).Scan(ctx, &srows)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, nil, err
		}
		for i := range srows {
			rec := srows[i].record()
			t, err := rec.Timing.Compile()
			if err != nil {
				continue // stored timings were checked; one that no longer compiles writes no next trigger
			}
			schedules[rec.ID], timings[rec.ID] = rec, t
		}
	}
	kept := rows[:0:0]
	cancelled := map[string][]timerRow{} // why → rows (one type per claim)
	var next []trigger
	for _, r := range rows {
		if r.ScheduleID == nil {
			kept = append(kept, r)
			continue
		}
		sch, ok := schedules[*r.ScheduleID]
		switch {
		case !ok:
			cancelled["schedule deleted"] = append(cancelled["schedule deleted"], r)
			continue
		case r.ScheduleVer == 0: // asked for by hand
			kept = append(kept, r)
			continue
		case sch.Paused:
			cancelled["paused"] = append(cancelled["paused"], r)
			continue
		}
		now := r.UpdatedAt // the claim's time, by the database's clock
		late := now.Sub(r.FireAt) > sch.CatchupWindow
		if late {
			cancelled[courier.ScheduleMissedError] = append(cancelled[courier.ScheduleMissedError], r)
		} else {
			kept = append(kept, r)
		}
		if r.ScheduleVer != sch.Version {
			continue // an update wrote the trigger of its own timing
		}
		timing := timings[sch.ID]
		nominal, err := time.Parse(time.RFC3339Nano, r.BizID[strings.LastIndexByte(r.BizID, '@')+1:])
		if err != nil {
			return nil, nil, fmt.Errorf("store: trigger %s/%s names no fire time: %w", r.BizType, r.BizID, err)
		}
		n := timing.Next(nominal)
		if floor := now.Add(-sch.CatchupWindow); !n.IsZero() && n.Before(floor) {
			n = timing.Next(floor.Add(-time.Nanosecond))
		}
		if n.IsZero() {
			continue
		}
		next = append(next, trigger{sch: sch, bizID: courier.ScheduleTriggerID(sch.ID, n), fireAt: timing.FireAt(sch.ID, n), version: sch.Version})
	}
	for why, rs := range cancelled {
		if err := s.cancelClaimed(ctx, tx, why, rs); err != nil {
			return nil, nil, err
		}
	}
	refs, err := s.insertTriggers(ctx, tx, next)
	return kept, refs, err
}

// cancelClaimed cancels rows the claim in tx took (all of one type) with why: on PostgreSQL by
// the row ids the claim read them back with, which nothing else can change before tx ends (it
// holds the rows' locks); on SQLite by key.
func (s *Store) cancelClaimed(ctx context.Context, tx bun.Tx, why string, rows []timerRow) error {
	set := "UPDATE courier_timers SET state = 'cancelled', claim = NULL, last_error = ?, finished_at = " + s.nowSQL()
	for chunk := range slices.Chunk(rows, 1000) {
		keys := make([]string, len(chunk))
		for i, r := range chunk {
			keys[i] = r.BizID
			if s.pg {
				keys[i] = r.RowRef
			}
		}
		var err error
		if s.pg {
			_, err = tx.NewRaw(set+" WHERE ctid = ANY(ARRAY[?]::tid[])", why, bun.List(keys)).Exec(ctx)
		} else {
			_, err = tx.NewRaw(set+" WHERE biz_type = ? AND biz_id IN (?)", why, chunk[0].BizType, bun.List(keys)).Exec(ctx)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CreateScheduleRecords stores many wheel schedules at once, each with its first trigger (the
// first fire time after now), in transactions of up to 500: for loading schedules in bulk
// (`courier bench schedules`). An id already stored is a conflict and nothing of its
// transaction is written. It returns the buckets the triggers wait in, for the caller to arm.
func (s *Store) CreateScheduleRecords(ctx context.Context, recs []courier.ScheduleRecord, now time.Time) ([]courier.TimerBucketRef, error) {
	seen := map[courier.TimerBucketRef]bool{}
	var refs []courier.TimerBucketRef
	for chunk := range slices.Chunk(recs, 500) {
		err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			values := make([]string, 0, len(chunk))
			args := make([]any, 0, len(chunk)*11)
			var ts []trigger
			for _, rec := range chunk {
				timing, err := rec.Timing.Compile()
				if err != nil {
					return fmt.Errorf("schedule %q: %w", rec.ID, err)
				}
				values = append(values, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', 1, "+s.nowSQL()+", "+s.nowSQL()+")")
				args = append(args, rec.ID, rec.BizType, rec.Timing.Cron, rec.Timing.Interval.Milliseconds(), rec.Timing.TimeZone,
					rec.Timing.Jitter.Milliseconds(), rec.CatchupWindow.Milliseconds(), string(rec.Payload), string(rec.Spec), rec.Paused)
				if nominal := timing.Next(now); !rec.Paused && !nominal.IsZero() {
					rec.Version = 1
					ts = append(ts, trigger{sch: rec, bizID: courier.ScheduleTriggerID(rec.ID, nominal), fireAt: timing.FireAt(rec.ID, nominal), version: 1})
				}
			}
			res, err := tx.NewRaw("INSERT INTO courier_schedules (id, biz_type, cron, interval_ms, time_zone, jitter_ms, catchup_ms, payload, spec, "+
				"paused, note, version, created_at, updated_at) VALUES "+strings.Join(values, ", ")+" ON CONFLICT (id) DO NOTHING", args...).Exec(ctx)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); int(n) != len(chunk) {
				return courier.Errorf(courier.CodeConflict, "%d of %d schedules already exist", len(chunk)-int(n), len(chunk))
			}
			rs, err := s.insertTriggers(ctx, tx, ts)
			for _, r := range rs {
				if !seen[r] {
					seen[r] = true
					refs = append(refs, r)
				}
			}
			return err
		})
		if err != nil {
			return refs, err
		}
	}
	return refs, nil
}
