package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

func runRec(bizID string, fireAt time.Time) courier.TimerRecord {
	r := timerRec(bizID, fireAt, "h")
	r.BizType, r.Mode = "order.close", courier.TimerModeWorkflow
	return r
}

// A timer of its own's row: its run claims it only once it is due by the database's clock and
// still scheduled (a cancel acknowledged first wins; a reschedule moves it), a repeated claim by
// the same run is its own, and only that run ends it, once.
func TestTimerRunClaimChangeFinish(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past, future := time.Now().Add(-time.Second).UTC(), time.Now().Add(time.Hour).UTC()
		ins, err := s.InsertTimers(ctx, []courier.TimerRecord{runRec("due", past), runRec("later", future),
			runRec("cancelled", past), runRec("moved", past)})
		require.NoError(t, err)
		require.Equal(t, courier.TimerModeWorkflow, ins[0].Record.Mode)
		_, changed, err := s.CancelTimerRecord(ctx, "order.close", "cancelled")
		require.NoError(t, err)
		require.True(t, changed)
		moved, changed, err := s.RescheduleTimerRecord(ctx, "order.close", "moved", future)
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, 1, moved.Version)

		rec, claimed, err := s.ClaimTimerRun(ctx, "order.close", "due", "run-a")
		require.NoError(t, err)
		require.True(t, claimed)
		require.Equal(t, courier.TimerFiring, rec.State)
		require.Equal(t, "run-a", rec.DeliveryID)
		require.Zero(t, rec.Attempts, "the run counts its attempts and records them at the end")
		_, claimed, err = s.ClaimTimerRun(ctx, "order.close", "due", "run-a")
		require.NoError(t, err)
		require.True(t, claimed, "a repeated claim (after a crash) is the run's own")
		rec, claimed, err = s.ClaimTimerRun(ctx, "order.close", "due", "run-b")
		require.NoError(t, err)
		require.False(t, claimed, "another run never takes it")
		require.Equal(t, courier.TimerFiring, rec.State)
		_, changed, err = s.CancelTimerRecord(ctx, "order.close", "due")
		require.NoError(t, err)
		require.False(t, changed, "a claimed timer cannot be cancelled")

		rec, claimed, err = s.ClaimTimerRun(ctx, "order.close", "later", "run-c")
		require.NoError(t, err)
		require.False(t, claimed, "never before its fire time by the database's clock")
		require.Equal(t, courier.TimerScheduled, rec.State)
		require.True(t, future.Truncate(time.Millisecond).Equal(rec.FireAt))
		rec, claimed, err = s.ClaimTimerRun(ctx, "order.close", "moved", "run-d")
		require.NoError(t, err)
		require.False(t, claimed, "rescheduled later: the run learns the new fire time")
		require.Equal(t, 1, rec.Version)
		rec, claimed, err = s.ClaimTimerRun(ctx, "order.close", "cancelled", "run-e")
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, courier.TimerCancelled, rec.State)
		_, _, err = s.ClaimTimerRun(ctx, "order.close", "missing", "run-f")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))

		ok, err := s.FinishTimerRun(ctx, "order.close", "due", "run-b", courier.TimerDelivered, 1, "")
		require.NoError(t, err)
		require.False(t, ok, "only the claiming run ends it")
		ok, err = s.FinishTimerRun(ctx, "order.close", "due", "run-a", courier.TimerFailed, 3, "503")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.FinishTimerRun(ctx, "order.close", "due", "run-a", courier.TimerDelivered, 4, "")
		require.NoError(t, err)
		require.False(t, ok, "ended once")
		got, err := s.GetTimerRecord(ctx, "order.close", "due")
		require.NoError(t, err)
		require.Equal(t, courier.TimerFailed, got.State)
		require.Equal(t, 3, got.Attempts)
		require.NotNil(t, got.FinishedAt)

		// A failed timer of its own is redelivered as a scheduled row due now; a bucketed
		// timer's redelivery leaves it alone.
		_, ok, err = s.RedeliverTimerRecord(ctx, "order.close", "due")
		require.NoError(t, err)
		require.False(t, ok, "not a bucketed timer")
		re, ok, err := s.RedeliverTimerRun(ctx, "order.close", "due")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, courier.TimerScheduled, re.State)
		require.Zero(t, re.Attempts)
		require.Empty(t, re.LastError)
		require.Equal(t, 1, re.Version)
		require.Nil(t, re.FinishedAt)
		_, claimed, err = s.ClaimTimerRun(ctx, "order.close", "due", "run-g")
		require.NoError(t, err)
		require.True(t, claimed, "due at once")
		_, ok, err = s.RedeliverTimerRun(ctx, "order.close", "later")
		require.NoError(t, err)
		require.False(t, ok, "only a failed timer is redelivered")
	})
}

// A cancel racing the run's claim either wins (never claimed) or loses (claimed, and the
// cancel is refused): never both, never neither.
func TestTimerRunClaimAndCancelRace(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past := time.Now().Add(-time.Second).UTC()
		const n = 100
		var recs []courier.TimerRecord
		for i := range n {
			recs = append(recs, runRec(fmt.Sprintf("r-%03d", i), past))
		}
		_, err := s.InsertTimers(ctx, recs)
		require.NoError(t, err)
		claimed, cancelled := make([]bool, n), make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			id := fmt.Sprintf("r-%03d", i)
			wg.Go(func() {
				_, ok, err := s.ClaimTimerRun(ctx, "order.close", id, "run-"+id)
				require.NoError(t, err)
				claimed[i] = ok
			})
			wg.Go(func() {
				_, ok, err := s.CancelTimerRecord(ctx, "order.close", id)
				require.NoError(t, err)
				cancelled[i] = ok
			})
		}
		wg.Wait()
		for i := range n {
			require.True(t, claimed[i] != cancelled[i], "r-%03d: claimed %v, cancelled %v", i, claimed[i], cancelled[i])
		}
	})
}

// Timers of their own are their runs' alone: a bucket never claims or reserves them (also in a
// type switched to buckets), the bucket sweeps pass them by, and the sweep of runs finds those
// overdue, once per grace.
func TestTimerRunRowsAndBuckets(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past := time.Now().Add(-time.Minute).UTC()
		own := runRec("own", past)
		own.BizType = "coupon.expiry" // the bucketed type's name: as if it was switched to buckets
		_, err := s.InsertTimers(ctx, []courier.TimerRecord{own, timerRec("bucketed", past, "h")})
		require.NoError(t, err)
		bucket := courier.TimerBucket(time.Now())

		overdue, err := s.OverdueTimerBuckets(ctx, 10*time.Second, 10)
		require.NoError(t, err)
		require.Len(t, overdue, 1, "the bucketed timer's bucket")
		_, ok, err := s.NextDueTimer(ctx, "coupon.expiry", bucket)
		require.NoError(t, err)
		require.True(t, ok)
		n, _, err := s.ReserveDueTimers(ctx, "coupon.expiry", bucket, "b/1", 10)
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the bucketed timer")
		got, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "b/2", 10)
		require.NoError(t, err)
		require.Empty(t, got, "the timer of its own is never a bucket's")
		rec, err := s.GetTimerRecord(ctx, "coupon.expiry", "own")
		require.NoError(t, err)
		require.Equal(t, courier.TimerScheduled, rec.State)

		runs, err := s.OverdueTimerRuns(ctx, 10*time.Second, 10)
		require.NoError(t, err)
		require.Empty(t, runs, "written a moment ago: its run may still be starting")
		_, err = s.DB().ExecContext(ctx, "UPDATE courier_timers SET updated_at = fire_at") // as if written a minute ago
		require.NoError(t, err)
		runs, err = s.OverdueTimerRuns(ctx, 10*time.Second, 10)
		require.NoError(t, err)
		require.Len(t, runs, 1)
		require.Equal(t, "own", runs[0].BizID)
		again, err := s.OverdueTimerRuns(ctx, 10*time.Second, 10)
		require.NoError(t, err)
		require.Empty(t, again, "looked at: not again before the grace has passed")
		_, err = s.DB().ExecContext(ctx, "UPDATE courier_timers SET updated_at = fire_at")
		require.NoError(t, err)
		none, err := s.OverdueTimerRuns(ctx, 2*time.Minute, 10)
		require.NoError(t, err)
		require.Empty(t, none, "not overdue by two minutes")

		// A row written by a create whose workflow id turned out taken goes, unless changed.
		_, err = s.InsertTimers(ctx, []courier.TimerRecord{runRec("taken", past), runRec("touched", past)})
		require.NoError(t, err)
		_, _, err = s.RescheduleTimerRecord(ctx, "order.close", "touched", past.Add(time.Hour))
		require.NoError(t, err)
		ok, err = s.DeleteUnstartedTimer(ctx, "order.close", "taken")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.DeleteUnstartedTimer(ctx, "order.close", "touched")
		require.NoError(t, err)
		require.False(t, ok, "a change has touched it")
		ok, err = s.DeleteUnstartedTimer(ctx, "coupon.expiry", "bucketed")
		require.NoError(t, err)
		require.False(t, ok, "never a bucketed timer")
	})
}

// A bucket's reserve makes its due timers firing without counting an attempt (a paused type's
// held timers have made none); the batch's delivery under the same claim takes exactly them and
// counts it, once, also when it is repeated after a crash.
func TestTimerReserveThenClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past := time.Now().Add(-time.Second).UTC()
		_, err := s.InsertTimers(ctx, []courier.TimerRecord{timerRec("a", past, "h"), timerRec("b", past, "h")})
		require.NoError(t, err)
		bucket := courier.TimerBucket(time.Now())
		n, _, err := s.ReserveDueTimers(ctx, "coupon.expiry", bucket, "run/1", 10)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, _, err = s.ReserveDueTimers(ctx, "coupon.expiry", bucket, "run/1", 10)
		require.NoError(t, err)
		require.Equal(t, 2, n, "a repeated reserve holds the same timers")
		rec, err := s.GetTimerRecord(ctx, "coupon.expiry", "a")
		require.NoError(t, err)
		require.Equal(t, courier.TimerFiring, rec.State)
		require.Zero(t, rec.Attempts, "reserved: no attempt made")
		_, changed, err := s.CancelTimerRecord(ctx, "coupon.expiry", "a")
		require.NoError(t, err)
		require.False(t, changed, "a reserved timer is firing: too late to cancel")
		_, err = s.InsertTimers(ctx, []courier.TimerRecord{timerRec("c", past, "h")})
		require.NoError(t, err)

		for range 2 { // the delivery, and its repeat after a crash
			got, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "run/1", 10)
			require.NoError(t, err)
			require.Len(t, got, 2, "exactly the reserved timers, not the one due since")
			for _, r := range got {
				require.Equal(t, 1, r.Attempts, "%s: its attempt counted once", r.BizID)
				require.Equal(t, "run/1/"+r.BizID, r.DeliveryID)
			}
		}
	})
}
