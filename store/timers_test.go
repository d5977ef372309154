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

func timerRec(bizID string, fireAt time.Time, hash string) courier.TimerRecord {
	return courier.TimerRecord{BizType: "coupon.expiry", BizID: bizID, FireAt: fireAt, Payload: []byte(`{"id":"` + bizID + `"}`),
		RequestHash: hash, Trace: courier.TraceContext{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
}

// A batch insert stores the new timers in one transaction and tells a repeat (same request)
// from a conflict (another request under the same key), also within one batch.
func TestTimerInsertOutcomes(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		got, err := s.InsertTimers(ctx, []courier.TimerRecord{timerRec("a", at, "h1"), timerRec("b", at, "h1")})
		require.NoError(t, err)
		require.True(t, got[0].Created && got[1].Created)
		require.Equal(t, courier.TimerScheduled, got[0].Record.State)
		require.True(t, at.Equal(got[0].Record.FireAt))
		require.JSONEq(t, `{"id":"a"}`, string(got[0].Record.Payload))
		require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", got[0].Record.Trace.Parent)

		got, err = s.InsertTimers(ctx, []courier.TimerRecord{timerRec("a", at, "h1"), timerRec("b", at, "h2"),
			timerRec("c", at, "h1"), timerRec("c", at, "h1"), timerRec("d", at, "h1"), timerRec("d", at, "h9")})
		require.NoError(t, err)
		require.Equal(t, []bool{false, false, true, false, true, false}, []bool{got[0].Created, got[1].Created, got[2].Created, got[3].Created, got[4].Created, got[5].Created})
		require.Equal(t, []bool{false, true, false, false, false, true}, []bool{got[0].Conflict, got[1].Conflict, got[2].Conflict, got[3].Conflict, got[4].Conflict, got[5].Conflict})

		rec, err := s.GetTimerRecord(ctx, "coupon.expiry", "c")
		require.NoError(t, err)
		require.Equal(t, "h1", rec.RequestHash)
		_, err = s.GetTimerRecord(ctx, "coupon.expiry", "zz")
		require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err))
	})
}

// Only due timers are claimed (never early), in fire order; a cancel acknowledged first wins
// over the claim and a claim first makes the cancel a no-op; a claim is repeatable.
func TestTimerClaimCancelReschedule(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		now := time.Now().UTC()
		past, future := now.Add(-2*time.Second), now.Add(time.Hour)
		var recs []courier.TimerRecord
		for i := range 5 {
			recs = append(recs, timerRec(fmt.Sprintf("due-%d", i), past.Add(time.Duration(i)*time.Millisecond), "h"))
		}
		recs = append(recs, timerRec("later", future, "h"), timerRec("cancelled", past, "h"), timerRec("moved", past, "h"))
		_, err := s.InsertTimers(ctx, recs)
		require.NoError(t, err)
		_, changed, err := s.CancelTimerRecord(ctx, "coupon.expiry", "cancelled")
		require.NoError(t, err)
		require.True(t, changed)
		moved, changed, err := s.RescheduleTimerRecord(ctx, "coupon.expiry", "moved", future)
		require.NoError(t, err)
		require.True(t, changed)
		require.Equal(t, 1, moved.Version)

		bucket := courier.TimerBucket(now)
		claimed, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "run-1/1", 3)
		require.NoError(t, err)
		require.Len(t, claimed, 3)
		require.Equal(t, []string{"due-0", "due-1", "due-2"}, []string{claimed[0].BizID, claimed[1].BizID, claimed[2].BizID})
		for _, c := range claimed {
			require.Equal(t, courier.TimerFiring, c.State)
			require.Equal(t, 1, c.Attempts)
			require.Equal(t, "run-1/1/"+c.BizID, c.DeliveryID)
		}
		again, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "run-1/1", 3)
		require.NoError(t, err)
		require.ElementsMatch(t, claimed, again, "a repeated claim returns its own rows")

		rec, changed, err := s.CancelTimerRecord(ctx, "coupon.expiry", "due-0")
		require.NoError(t, err)
		require.False(t, changed, "a firing timer cannot be cancelled")
		require.Equal(t, courier.TimerFiring, rec.State)
		_, changed, err = s.RescheduleTimerRecord(ctx, "coupon.expiry", "due-1", future)
		require.NoError(t, err)
		require.False(t, changed)

		rest, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "run-1/2", 100)
		require.NoError(t, err)
		require.Len(t, rest, 2, "due-3 and due-4; never the cancelled, the moved or the later one")
		next, ok, err := s.NextDueTimer(ctx, "coupon.expiry", courier.TimerBucket(future))
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, future.Truncate(time.Millisecond).Equal(next))
		_, ok, err = s.NextDueTimer(ctx, "coupon.expiry", bucket)
		require.NoError(t, err)
		require.False(t, ok, "nothing scheduled left in the bucket")
		none, err := s.ClaimDueTimers(ctx, "coupon.expiry", courier.TimerBucket(future), "run-2/1", 100)
		require.NoError(t, err)
		require.Empty(t, none, "a timer due in an hour is not claimed by a later bucket's run now")

		// Delivered ones finish; a failed one leaves the claim, firing, for a run of its own.
		require.NoError(t, s.FinishTimerClaim(ctx, "coupon.expiry", "run-1/1", []store.TimerOutcome{
			{BizID: "due-0", Delivered: true}, {BizID: "due-1", Delivered: true}, {BizID: "due-2", LastError: "503"}}))
		again, err = s.ClaimDueTimers(ctx, "coupon.expiry", bucket, "run-1/1", 3)
		require.NoError(t, err)
		require.Empty(t, again, "a finished claim has nothing left")
		got, err := s.GetTimerRecord(ctx, "coupon.expiry", "due-0")
		require.NoError(t, err)
		require.Equal(t, courier.TimerDelivered, got.State)
		require.NotNil(t, got.FinishedAt)
		got, err = s.GetTimerRecord(ctx, "coupon.expiry", "due-2")
		require.NoError(t, err)
		require.Equal(t, courier.TimerFiring, got.State)
		require.Equal(t, "503", got.LastError)

		ok, err = s.RecordTimerResult(ctx, "coupon.expiry", "due-2", courier.TimerFailed, 4, "503 again")
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.RecordTimerResult(ctx, "coupon.expiry", "due-2", courier.TimerDelivered, 5, "")
		require.NoError(t, err)
		require.False(t, ok, "a finished timer stays as it ended")
		re, ok, err := s.RedeliverTimerRecord(ctx, "coupon.expiry", "due-2")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, courier.TimerFiring, re.State)
		require.Zero(t, re.Attempts)
		_, ok, err = s.RedeliverTimerRecord(ctx, "coupon.expiry", "due-0")
		require.NoError(t, err)
		require.False(t, ok, "only a failed timer is redelivered")
	})
}

// Concurrent claims never take one timer twice, and a cancel racing them either wins (the
// timer is never claimed) or loses (it was claimed first and stays firing).
func TestTimerClaimsAndCancelsRace(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past := time.Now().Add(-time.Second).UTC()
		var recs []courier.TimerRecord
		for i := range 200 {
			recs = append(recs, timerRec(fmt.Sprintf("t-%03d", i), past, "h"))
		}
		_, err := s.InsertTimers(ctx, recs)
		require.NoError(t, err)
		bucket := courier.TimerBucket(time.Now())
		var mu sync.Mutex
		claimedBy := map[string]string{}
		cancelled := map[string]bool{}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for n := 0; ; n++ {
					claim := fmt.Sprintf("w%d/%d", w, n)
					got, err := s.ClaimDueTimers(ctx, "coupon.expiry", bucket, claim, 7)
					require.NoError(t, err)
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, r := range got {
						require.Empty(t, claimedBy[r.BizID], "%s claimed twice", r.BizID)
						claimedBy[r.BizID] = claim
					}
					mu.Unlock()
					require.NoError(t, s.FinishTimerClaim(ctx, "coupon.expiry", claim, nil))
				}
			})
		}
		wg.Go(func() {
			for i := 0; i < 200; i += 3 {
				_, changed, err := s.CancelTimerRecord(ctx, "coupon.expiry", fmt.Sprintf("t-%03d", i))
				require.NoError(t, err)
				if changed {
					mu.Lock()
					cancelled[fmt.Sprintf("t-%03d", i)] = true
					mu.Unlock()
				}
			}
		})
		wg.Wait()
		for i := range 200 {
			id := fmt.Sprintf("t-%03d", i)
			require.True(t, (claimedBy[id] != "") != cancelled[id], "%s: claimed %q, cancelled %v", id, claimedBy[id], cancelled[id])
		}
	})
}

// Lists page newest first; overdue buckets and stranded timers are found; finished rows past
// their retention are purged in bounded batches.
func TestTimerListSweepPurge(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		past := time.Now().Add(-time.Minute).UTC()
		var recs []courier.TimerRecord
		for i := range 12 {
			recs = append(recs, timerRec(fmt.Sprintf("l-%02d", i), past, "h"))
		}
		_, err := s.InsertTimers(ctx, recs)
		require.NoError(t, err)

		overdue, err := s.OverdueTimerBuckets(ctx, 10*time.Second, 10)
		require.NoError(t, err)
		require.Equal(t, []courier.TimerBucketRef{{BizType: "coupon.expiry", Bucket: courier.TimerBucket(past)}}, overdue)
		none, err := s.OverdueTimerBuckets(ctx, 2*time.Minute, 10)
		require.NoError(t, err)
		require.Empty(t, none, "not overdue by two minutes")

		var seen []string
		f := courier.TimerFilter{BizType: "coupon.expiry", Limit: 5}
		for {
			page, more, err := s.ListTimerRecords(ctx, f)
			require.NoError(t, err)
			for _, r := range page {
				seen = append(seen, r.BizID)
			}
			if !more {
				break
			}
			last := page[len(page)-1]
			f.After = &courier.TimerCursor{CreatedAt: last.CreatedAt, BizType: last.BizType, BizID: last.BizID}
		}
		require.Len(t, seen, 12)

		claimed, err := s.ClaimDueTimers(ctx, "coupon.expiry", courier.TimerBucket(time.Now()), "c/1", 4)
		require.NoError(t, err)
		require.Len(t, claimed, 4)
		require.NoError(t, s.FinishTimerClaim(ctx, "coupon.expiry", "c/1", []store.TimerOutcome{
			{BizID: claimed[0].BizID, Delivered: true}, {BizID: claimed[1].BizID, Delivered: true},
			{BizID: claimed[2].BizID, LastError: "refused", Failed: true}, {BizID: claimed[3].BizID, LastError: "503"}}))
		stranded, err := s.StrandedTimers(ctx, 0, 10)
		require.NoError(t, err)
		require.Empty(t, stranded, "the failed ones are their own runs' now")
		ok, err := s.RecordTimerResult(ctx, "coupon.expiry", claimed[2].BizID, courier.TimerFailed, 1, "refused")
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = s.RedeliverTimerRecord(ctx, "coupon.expiry", claimed[2].BizID)
		require.NoError(t, err)
		require.True(t, ok)
		stranded, err = s.StrandedTimers(ctx, 0, 10)
		require.NoError(t, err)
		require.Len(t, stranded, 1, "redelivered, its run not yet started")
		stranded, err = s.StrandedTimers(ctx, time.Hour, 10)
		require.NoError(t, err)
		require.Empty(t, stranded, "not stranded for an hour")
		require.NoError(t, s.MarkTimerHanded(ctx, "coupon.expiry", claimed[2].BizID))
		stranded, err = s.StrandedTimers(ctx, 0, 10)
		require.NoError(t, err)
		require.Empty(t, stranded)

		delivered, _, err := s.ListTimerRecords(ctx, courier.TimerFilter{State: courier.TimerDelivered})
		require.NoError(t, err)
		require.Len(t, delivered, 2)
		n, err := s.PurgeTimerRecords(ctx, "coupon.expiry", time.Hour, 10)
		require.NoError(t, err)
		require.Zero(t, n, "finished a moment ago")
		n, err = s.PurgeTimerRecords(ctx, "coupon.expiry", time.Nanosecond, 1)
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "bounded by the batch")
		n, err = s.PurgeTimerRecords(ctx, "coupon.expiry", time.Nanosecond, 10)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		counts, err := s.CountTimerRecords(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 8, counts["coupon.expiry"][courier.TimerScheduled])
		require.EqualValues(t, 2, counts["coupon.expiry"][courier.TimerFiring], "one handed over, one redelivered")
	})
}

// A token bucket shared through the database never hands out more than its burst at once,
// refills at its rate, and is shared by concurrent takers.
func TestTakeTokens(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		got, wait, err := s.TakeTokens(ctx, "biz:x", 10, 5, 3)
		require.NoError(t, err)
		require.Equal(t, 3, got)
		require.Zero(t, wait)
		got, wait, err = s.TakeTokens(ctx, "biz:x", 10, 5, 10)
		require.NoError(t, err)
		require.GreaterOrEqual(t, got, 2)
		require.LessOrEqual(t, got, 3, "the burst bounds what a moment gives")
		require.Positive(t, wait)
		require.LessOrEqual(t, wait, 100*time.Millisecond, "a token every 100 ms")

		var mu sync.Mutex
		total := 0
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 5 {
					n, _, err := s.TakeTokens(ctx, "biz:y", 0.001, 20, 3)
					require.NoError(t, err)
					mu.Lock()
					total += n
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 20, total, "20 takers of 3 share a burst of 20 and a rate too slow to refill")
		n, _, err := s.TakeTokens(ctx, "unlimited", 0, 0, 7)
		require.NoError(t, err)
		require.Equal(t, 7, n, "a rate of 0 is unlimited")
	})
}
