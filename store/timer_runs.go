package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/courier-oss/courier"
)

// The rows of timers of their own (mode 'workflow'): the API decides their cancel and
// reschedule here (CancelTimerRecord, RescheduleTimerRecord), and their run follows the row:
// it claims it when its fire time has come by the database's clock, and records how the
// delivery ended (docs/timers.md).

// ClaimTimerRun is a timer of its own's run taking its row for delivery: a scheduled row whose
// fire time has come by the database's clock becomes firing, claimed by claim (the run's id,
// also the delivery's id). claimed is true when this call took it, or took it before (a claim
// repeated after a crash). Otherwise the row is returned as it is: still scheduled (not due
// yet by the database's clock, or rescheduled later), cancelled, or taken by another run. A
// timer without a row is not_found. A cancel or reschedule acknowledged first wins; one that
// comes after the claim finds the timer firing.
func (s *Store) ClaimTimerRun(ctx context.Context, bizType, bizID, claim string) (rec courier.TimerRecord, claimed bool, err error) {
	var rows []timerRow
	err = s.db.NewRaw("UPDATE courier_timers SET state = 'firing', claim = ?, delivery_id = ?, updated_at = "+s.nowSQL()+
		" WHERE biz_type = ? AND biz_id = ? AND mode = 'workflow' AND state = 'scheduled' AND fire_at <= "+s.nowSQL()+
		" RETURNING "+timerColumns, claim, claim, bizType, bizID).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return rec, false, err
	}
	if len(rows) == 1 {
		return rows[0].record(), true, nil
	}
	key := courier.TimerKey{BizType: bizType, BizID: bizID}
	got, err := s.timersByKey(ctx, s.db, []courier.TimerKey{key})
	if err != nil {
		return rec, false, err
	}
	row := got[key]
	if row == nil {
		return rec, false, timerNotFound(bizType, bizID)
	}
	ours := row.State == string(courier.TimerFiring) && row.Claim != nil && *row.Claim == claim
	return row.record(), ours, nil
}

// FinishTimerRun records how the delivery of a timer of its own ended: delivered, or failed
// with its last error, after attempts in all. Only the run that claimed the row (claim) ends
// it, once; ok says whether this call did.
func (s *Store) FinishTimerRun(ctx context.Context, bizType, bizID, claim string, state courier.TimerState, attempts int, lastError string) (bool, error) {
	if state != courier.TimerDelivered && state != courier.TimerFailed {
		return false, fmt.Errorf("store: a timer ends delivered or failed, not %s", state)
	}
	res, err := s.db.NewRaw("UPDATE courier_timers SET state = ?, attempts = ?, last_error = ?, finished_at = "+s.nowSQL()+
		", updated_at = "+s.nowSQL()+" WHERE biz_type = ? AND biz_id = ? AND state = 'firing' AND claim = ?",
		string(state), attempts, lastError, bizType, bizID, claim).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// RedeliverTimerRun makes a failed timer of its own scheduled again, due now by the database's
// clock, its attempts and error cleared and its version bumped: the caller starts a new run,
// which claims it like any due timer (OverdueTimerRuns finds it if that start is lost). A
// timer that is not failed is returned as it is, with ok false.
func (s *Store) RedeliverTimerRun(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error) {
	return s.updateTimerIf(ctx, bizType, bizID, "state = 'failed' AND mode = 'workflow'",
		"state = 'scheduled', fire_at = "+s.nowSQL()+", "+redeliverSet)
}

// OverdueTimerRuns takes up to limit timers of their own still scheduled more than grace after
// their fire time, and not looked at for grace (each is marked, so a timer is returned at most
// once per grace, by one caller): their run should have claimed them by now. Either the
// engine is that far behind (its workflow tasks wait in its queue), or the run never started
// (a create or redelivery whose start failed) or missed a reschedule to an earlier time (the
// signal was lost). The sweep signals (or starts) their runs.
func (s *Store) OverdueTimerRuns(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerRecord, error) {
	var rows []timerRow
	overdue := "state = 'scheduled' AND mode = 'workflow' AND fire_at < " + s.nowPlusSQL(-grace) + " AND updated_at < " + s.nowPlusSQL(-grace)
	err := s.db.NewRaw("UPDATE courier_timers SET updated_at = "+s.nowSQL()+" WHERE "+overdue+
		" AND (biz_type, biz_id) IN (SELECT biz_type, biz_id FROM courier_timers WHERE "+overdue+" ORDER BY fire_at LIMIT ?)"+
		" RETURNING "+timerColumns, limit).Scan(ctx, &rows)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return records(rows), nil
}

// DeleteUnstartedTimer removes the row of a timer of its own that is still exactly as it was
// inserted (scheduled, never changed): the create that wrote it found its workflow id taken
// by a run that keeps no row (a timer armed before rows were kept, or one whose row was
// purged), so that run, not the row, is the timer. ok says whether it was removed.
func (s *Store) DeleteUnstartedTimer(ctx context.Context, bizType, bizID string) (bool, error) {
	res, err := s.db.NewRaw("DELETE FROM courier_timers WHERE biz_type = ? AND biz_id = ? AND mode = 'workflow'"+
		" AND state = 'scheduled' AND version = 0", bizType, bizID).Exec(ctx)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
