package integration

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/pauses"
)

// A paused business type holds everything it delivers: timers of their own, bucketed timers
// and schedule runs that fall due while it is paused are kept and not delivered (the answers
// say paused), a delivery the receiver refuses is not tried while paused, and on resume each is
// delivered once, at its first attempt, late. Another type keeps flowing meanwhile. On both
// databases; the worker learns of the pause by its own reads (and LISTEN on PostgreSQL).
func TestPausedBizTypeHoldsDeliveries(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) { testPausedBizType(t, dialect) })
	}
}

func testPausedBizType(t *testing.T, dialect string) {
	s := newStack(t, dialect)
	rcv, url, secret := newBucketReceiver(t)
	ctx := t.Context()
	for _, b := range []courier.BizType{
		{Name: "order.close", Delivery: courier.DeliveryHTTP, CallbackURL: url, Secrets: []string{secret}, MaxAttempts: 1},
		{Name: "coupon.expiry", Delivery: courier.DeliveryHTTP, CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed, MaxAttempts: 1},
		{Name: "other", Delivery: courier.DeliveryHTTP, CallbackURL: url, Secrets: []string{secret}},
	} {
		_, _, err := s.store.PutBizType(ctx, b)
		require.NoError(t, err)
	}
	s.watchPauses()
	s.timerWorker(false)
	_, ptok, err := s.store.CreateAPIKey(ctx, "producer", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(t, err)
	_, atok, err := s.store.CreateAPIKey(ctx, "ops", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	svc := s.timerService()
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store, BizTypes: s.store,
		Timers: svc, Schedules: svc, Logger: quiet, Pauses: pauses.NewService(s.store, quiet)}))
	t.Cleanup(srv.Close)
	producer, err := cc.New(srv.URL, cc.WithAPIKey(ptok))
	require.NoError(t, err)
	admin, err := cc.New(srv.URL, cc.WithAPIKey(atok))
	require.NoError(t, err)

	for _, typ := range []string{"order.close", "coupon.expiry"} {
		p, err := admin.Pause(ctx, courier.PauseBizType, typ, "receiver maintenance")
		require.NoError(t, err)
		require.Equal(t, "receiver maintenance", p.Reason)
		require.Contains(t, p.PausedBy, "api key ops")
	}
	bt, err := admin.GetBizType(ctx, "order.close")
	require.NoError(t, err)
	require.NotNil(t, bt.Paused, "the business type says it is paused")
	require.Eventually(t, func() bool { // the worker's next read of the pauses (every 200 ms)
		_, ok := s.paused.Current().BizType("coupon.expiry")
		return ok
	}, 10*time.Second, 20*time.Millisecond)

	// Due within a second: timers of their own, bucketed ones, a schedule run every second, and
	// a timer of a type that is not paused.
	due := time.Now().Add(time.Second)
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("o-%d", i)
		_, err := producer.CreateTimer(ctx, cc.TimerRequest{BizType: "order.close", BizID: id, When: cc.At(due)})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	var batch []cc.TimerRequest
	for i := range 20 {
		id := fmt.Sprintf("c-%02d", i)
		batch = append(batch, cc.TimerRequest{BizType: "coupon.expiry", BizID: id, When: cc.At(due)})
		ids = append(ids, id)
	}
	res, err := producer.CreateTimers(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, 20, res.Created)
	_, err = producer.CreateSchedule(ctx, "close-sweep", cc.ScheduleSpec{BizType: "order.close", Interval: api.PositiveDuration(time.Second)})
	require.NoError(t, err)
	_, err = producer.CreateTimer(ctx, cc.TimerRequest{BizType: "other", BizID: "x-1", When: cc.At(due)})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return len(rcv.arrivals("x-1")) == 1 }, 30*time.Second, 50*time.Millisecond,
		"a type that is not paused keeps flowing")
	held := append(ids, "close-sweep")
	require.Never(t, func() bool { // until well past every fire time
		for _, id := range held {
			if len(rcv.arrivals(id)) > 0 {
				return true
			}
		}
		return false
	}, 3*time.Second, 50*time.Millisecond, "a delivery of a paused type was made")
	// Held timers of both modes read alike: firing (due, and taken for delivery on courier's
	// workflow queue, so too late to cancel), paused, no attempt made; in GET and in the list.
	for _, k := range []struct{ bizType, bizID string }{{"order.close", "o-0"}, {"coupon.expiry", "c-00"}} {
		tm, err := producer.GetTimer(ctx, k.bizType, k.bizID)
		require.NoError(t, err)
		require.Equal(t, courier.TimerFiring, tm.State, "%s: due, and waiting for its delivery", k.bizID)
		require.NotNil(t, tm.Paused, k.bizID)
		require.Equal(t, "receiver maintenance", tm.Paused.Reason)
		require.Equal(t, 0, tm.Attempts, "%s: no attempt while paused", k.bizID)
	}
	sc, err := producer.GetSchedule(ctx, "close-sweep")
	require.NoError(t, err)
	require.NotNil(t, sc.BizTypePaused)
	for _, typ := range []string{"order.close", "coupon.expiry"} {
		page, err := producer.ListTimers(ctx, cc.TimerQuery{BizType: typ})
		require.NoError(t, err)
		require.NotEmpty(t, page.Items)
		for _, it := range page.Items {
			require.Equal(t, courier.TimerFiring, it.State, "%s in the list", it.BizID)
			require.NotNil(t, it.Paused, "%s in the list says it is paused", it.BizID)
			require.Equal(t, 0, it.Attempts, "%s in the list", it.BizID)
		}
	}
	for _, k := range []struct{ bizType, bizID string }{{"order.close", "o-1"}, {"coupon.expiry", "c-01"}} {
		_, err := producer.CancelTimer(ctx, k.bizType, k.bizID)
		var ce *cc.Error
		require.ErrorAs(t, err, &ce, "%s: a held timer has fired: too late to cancel", k.bizID)
		require.Equal(t, courier.CodeConflict, ce.Code)
		require.Equal(t, "firing", ce.Details["state"])
	}

	// A receiver that refuses o-2 for good: while paused it is not even tried. Resumed, every
	// held delivery is made once, at its first attempt (o-2's single allowed attempt is spent
	// only now), after its fire time.
	rcv.set("o-2", 410)
	resumed := time.Now()
	for _, typ := range []string{"order.close", "coupon.expiry"} {
		_, err := admin.Resume(ctx, courier.PauseBizType, typ)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, id := range held {
			if len(rcv.arrivals(id)) == 0 {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "every held delivery is made on resume")
	for _, id := range ids {
		got := rcv.arrivals(id)
		require.Len(t, got, 1, "%s delivered once", id)
		require.Equal(t, 1, int(got[0].attempt), "%s: its first attempt", id)
		require.False(t, got[0].at.Before(resumed), "%s delivered after the resume", id)
	}
	require.Eventually(t, func() bool {
		tm, err := producer.GetTimer(ctx, "order.close", "o-2")
		return err == nil && tm.State == courier.TimerFailed && tm.Attempts == 1
	}, 30*time.Second, 100*time.Millisecond, "o-2 failed at its one attempt, made after the resume")
	tm, err := producer.GetTimer(ctx, "order.close", "o-0")
	require.NoError(t, err)
	require.Nil(t, tm.Paused)
	_, err = admin.Resume(ctx, courier.PauseBizType, "order.close")
	require.ErrorIs(t, err, cc.ErrNotFound, "not paused any more")
}
