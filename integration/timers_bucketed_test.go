package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/webhook"
)

// bucketReceiver takes timer callbacks and failure events: it checks every signature, records
// each delivery (biz id → arrivals and delivery ids) and answers the status the test set for a
// biz id (200 by default).
type bucketReceiver struct {
	mu       sync.Mutex
	verifier *webhook.Verifier
	got      map[string][]arrival
	failures []api.TimerFailedEvent
	answer   map[string]int // biz id → status to answer
	bad      int
}

type arrival struct {
	at         time.Time
	fireAt     time.Time
	deliveryID string
	attempt    int32
}

func newBucketReceiver(t *testing.T) (*bucketReceiver, string, string) {
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	r := &bucketReceiver{verifier: v, got: map[string][]arrival{}, answer: map[string]int{}}
	return r, startHTTP(t, r), secret
}

func (r *bucketReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.verifier.Verify(body, req.Header); err != nil && err != webhook.ErrReplay {
		r.bad++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if req.URL.Path == "/failed" {
		var ev api.TimerFailedEvent
		_ = json.Unmarshal(body, &ev)
		r.failures = append(r.failures, ev)
		return
	}
	var cb api.TimerCallback
	_ = json.Unmarshal(body, &cb)
	r.got[cb.BizID] = append(r.got[cb.BizID], arrival{at: now, fireAt: cb.FireAt, deliveryID: cb.DeliveryID, attempt: cb.Attempt})
	if st := r.answer[cb.BizID]; st != 0 {
		w.WriteHeader(st)
	}
}

func (r *bucketReceiver) set(id string, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer[id] = status
}

func (r *bucketReceiver) arrivals(id string) []arrival {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]arrival(nil), r.got[id]...)
}

// delivered says how many distinct timers arrived (by distinct delivery ids per timer).
func (r *bucketReceiver) delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *bucketReceiver) failureEvents() []api.TimerFailedEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]api.TimerFailedEvent(nil), r.failures...)
}

// bucketedGateway serves the gateway with the stack's timer service and returns a producer's and
// an admin's client.
func (s *stack) bucketedGateway() (producer, admin *cc.Client) {
	ctx := s.t.Context()
	_, ptok, err := s.store.CreateAPIKey(ctx, "producer", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(s.t, err)
	_, atok, err := s.store.CreateAPIKey(ctx, "admin", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(s.t, err)
	svc := s.timerService()
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
		BizTypes: s.store, Timers: svc, Schedules: svc, Logger: quiet}))
	s.t.Cleanup(srv.Close)
	producer, err = cc.New(srv.URL, cc.WithAPIKey(ptok))
	require.NoError(s.t, err)
	admin, err = cc.New(srv.URL, cc.WithAPIKey(atok))
	require.NoError(s.t, err)
	return producer, admin
}

// Bucketed timers through the gateway's batch endpoint, on both databases: every valid timer
// is armed and delivered once, never early; invalid ones are refused on their own and write
// nothing; an acknowledged cancel always wins, also racing the bucket's firing; a reschedule
// moves a timer to its new bucket; the list and GET read the rows.
func TestBucketedTimers(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			rcv, url, secret := newBucketReceiver(t)
			ctx := t.Context()
			_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "coupon.expiry", Delivery: courier.DeliveryHTTP,
				CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed})
			require.NoError(t, err)
			s.timerWorker(false)
			producer, _ := s.bucketedGateway()

			// 300 timers due between 2 and 4 seconds from now (about 3 buckets), and a few the
			// gateway must refuse on their own.
			start := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
			var reqs []cc.TimerRequest
			due := map[string]time.Time{}
			for i := range 300 {
				id := fmt.Sprintf("c-%03d", i)
				at := start.Add(time.Duration(i) * 2 * time.Second / 300).Truncate(time.Millisecond)
				due[id] = at
				reqs = append(reqs, cc.TimerRequest{BizType: "coupon.expiry", BizID: id, When: cc.At(at), Payload: json.RawMessage(`{"coupon":1}`)})
			}
			reqs = append(reqs,
				cc.TimerRequest{BizType: "coupon.expiry", BizID: "bad/id", When: cc.At(start)},
				cc.TimerRequest{BizType: "no.such.type", BizID: "x-1", When: cc.At(start)},
				cc.TimerRequest{BizType: "coupon.expiry", BizID: "x-2"},
				cc.TimerRequest{BizType: "coupon.expiry", BizID: "c-000", When: cc.At(start.Add(time.Hour))}, // another request, same key
			)
			res, err := producer.CreateTimers(ctx, reqs)
			require.NoError(t, err)
			require.Equal(t, 300, res.Created)
			require.Equal(t, 4, res.Refused)
			for _, it := range res.Items[300:] {
				require.Equal(t, api.BatchRefused, it.Outcome)
				require.NotNil(t, it.Error)
				require.Nil(t, it.Timer)
			}
			require.Equal(t, http.StatusConflict, res.Items[303].Status, "a different request under an armed key")
			require.Equal(t, courier.TimerModeBucketed, res.Items[0].Timer.Mode)
			_, err = producer.GetTimer(ctx, "coupon.expiry", "x-2")
			require.ErrorIs(t, err, cc.ErrNotFound, "a refused timer is not written")

			again, err := producer.CreateTimers(ctx, reqs[:10])
			require.NoError(t, err)
			require.Equal(t, 10, again.Existing, "a repeat of the batch is recognised")

			// Cancel 20 at once: acknowledged, they never fire. Move 10 to a bucket 3 s later.
			cancelled := map[string]bool{}
			for i := 0; i < 300; i += 15 {
				id := fmt.Sprintf("c-%03d", i)
				tm, err := producer.CancelTimer(ctx, "coupon.expiry", id)
				require.NoError(t, err)
				require.Equal(t, courier.TimerCancelled, tm.State)
				cancelled[id] = true
			}
			for i := 1; i < 300; i += 30 {
				id := fmt.Sprintf("c-%03d", i)
				due[id] = due[id].Add(3 * time.Second)
				tm, err := producer.RescheduleTimer(ctx, "coupon.expiry", id, cc.Reschedule{When: cc.At(due[id])})
				require.NoError(t, err)
				require.Equal(t, 1, tm.Version)
				require.True(t, due[id].Equal(tm.FireAt))
			}
			// Race cancels against the firing: each answer must agree with what arrives.
			var mu sync.Mutex
			raced := map[string]bool{} // id → the cancel was acknowledged
			var wg sync.WaitGroup
			for i := 7; i < 300; i += 15 {
				id := fmt.Sprintf("c-%03d", i)
				if cancelled[id] {
					continue
				}
				wg.Go(func() {
					// The cancel is sent 5 ms before the fire time on purpose: it races the bucket.
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(due[id]) - 5*time.Millisecond):
					}
					tm, err := producer.CancelTimer(ctx, "coupon.expiry", id)
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						raced[id] = tm.State == courier.TimerCancelled
						return
					}
					require.ErrorIs(t, err, cc.ErrConflict, "a cancel either wins or finds the timer firing")
					raced[id] = false
				})
			}
			wg.Wait()
			for id, won := range raced {
				if won {
					cancelled[id] = true
				}
			}
			want := 300 - len(cancelled)
			require.Eventually(t, func() bool { return rcv.delivered() >= want }, 90*time.Second, 100*time.Millisecond,
				"every timer not cancelled arrives")
			require.Never(t, func() bool { return rcv.delivered() > want }, 2*time.Second, 100*time.Millisecond,
				"no cancelled timer arrives")
			for id, at := range due {
				arr := rcv.arrivals(id)
				if cancelled[id] {
					require.Empty(t, arr, "%s was cancelled (acknowledged) and must never fire", id)
					continue
				}
				require.NotEmpty(t, arr, id)
				ids := map[string]bool{}
				for _, a := range arr {
					require.False(t, a.at.Before(at), "%s arrived %s early", id, at.Sub(a.at))
					require.True(t, a.fireAt.Equal(at), "%s: the callback names its fire time", id)
					ids[a.deliveryID] = true
				}
				require.Len(t, ids, 1, "%s: one delivery (repeats keep their delivery id)", id)
			}
			require.Zero(t, rcv.bad, "every callback is signed")

			require.Eventually(t, func() bool {
				tm, err := producer.GetTimer(ctx, "coupon.expiry", "c-002")
				return err == nil && tm.State == courier.TimerDelivered && tm.Attempts == 1
			}, 10*time.Second, 50*time.Millisecond)
			_, err = producer.CancelTimer(ctx, "coupon.expiry", "c-002")
			require.ErrorIs(t, err, cc.ErrConflict, "a delivered timer cannot be cancelled")
			var listed int
			for tm, err := range producer.AllTimers(ctx, cc.TimerQuery{BizType: "coupon.expiry", State: courier.TimerCancelled}) {
				require.NoError(t, err)
				require.Equal(t, courier.TimerModeBucketed, tm.Mode)
				listed++
			}
			require.Equal(t, len(cancelled), listed, "the list reads the rows")
		})
	}
}

// Bucketed MQ timers go out in batches through the broker router to NATS: each timer once
// (JetStream deduplicates a repeat by its message id), and a worker killed with SIGKILL in the
// middle of the burst loses none: a new worker delivers the rest.
func TestBucketedTimersSurviveAKill(t *testing.T) {
	s := newStack(t, "postgres")
	s.createStream("COUPONS", "coupons.>")
	ctx := t.Context()
	_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "coupon.mq", Delivery: courier.DeliveryMQ, Topic: "coupons.expired",
		TimerMode: courier.TimerModeBucketed})
	require.NoError(t, err)
	svc := s.timerService()

	const total = 3000
	start := time.Now().Add(4 * time.Second)
	for b := 0; b < total/1000; b++ {
		reqs := make([]api.TimerRequest, 1000)
		for i := range reqs {
			n := b*1000 + i
			reqs[i] = api.TimerRequest{BizType: "coupon.mq", BizID: fmt.Sprintf("m-%04d", n),
				When: api.At(start.Add(time.Duration(n) * 3 * time.Second / total))}
		}
		res, err := svc.CreateBatch(ctx, reqs)
		require.NoError(t, err)
		for _, r := range res {
			require.NoError(t, r.Err)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerRoleEnv+"=1", workerTimersEnv+"=1",
		"COURIER_IT_TEMPORAL="+s.ts.GetFrontendHostPort(), "COURIER_IT_NAMESPACE="+s.ts.GetDefaultNamespace(),
		"COURIER_IT_DB="+s.dsn, "COURIER_IT_NATS="+s.nats.URL())
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	delivered := func() int64 {
		counts, err := s.store.CountTimerRecords(ctx)
		require.NoError(t, err)
		return counts["coupon.mq"][courier.TimerDelivered]
	}
	require.Eventually(t, func() bool { return delivered() >= 200 }, 2*time.Minute, 20*time.Millisecond, "the first worker makes progress")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_, _ = cmd.Process.Wait()
	killedAt := delivered()
	require.Less(t, killedAt, int64(total), "the kill landed mid-burst")
	t.Logf("killed the worker with %d of %d timers delivered", killedAt, total)

	s.timerWorker(false)
	require.Eventually(t, func() bool { return delivered() == total }, 3*time.Minute, 100*time.Millisecond,
		"the new worker delivers every timer")
	got, payloads := s.streamIDs("COUPONS")
	require.Len(t, got, total, "one message per timer after the broker's deduplication")
	for id, n := range got {
		require.Equal(t, 1, n, "message %s", id)
	}
	for _, p := range payloads {
		var cb api.TimerCallback
		require.NoError(t, json.Unmarshal(p, &cb))
		require.False(t, time.Now().Before(cb.FireAt))
	}
}

// A timer whose bucket never started (a crash between its insert and its bucket's start) is
// found by the sweep and delivered; so is a redelivered timer whose run never started.
func TestBucketedTimerSweep(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv, url, secret := newBucketReceiver(t)
	ctx := t.Context()
	_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "coupon.sweep", Delivery: courier.DeliveryHTTP,
		CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed})
	require.NoError(t, err)
	// Rows written as the timer service writes them, but no bucket armed.
	past := time.Now().Add(-20 * time.Second)
	_, err = s.store.InsertTimers(ctx, []courier.TimerRecord{
		{BizType: "coupon.sweep", BizID: "orphan-1", FireAt: past, Payload: []byte(`1`), RequestHash: "h"},
		{BizType: "coupon.sweep", BizID: "orphan-2", FireAt: past.Add(time.Second), Payload: []byte(`2`), RequestHash: "h"}})
	require.NoError(t, err)
	s.timerWorker(false)
	require.Eventually(t, func() bool { return rcv.delivered() == 2 }, time.Minute, 100*time.Millisecond,
		"the sweep arms the orphans' bucket")
	for _, id := range []string{"orphan-1", "orphan-2"} {
		require.Eventually(t, func() bool {
			rec, err := s.store.GetTimerRecord(ctx, "coupon.sweep", id)
			return err == nil && rec.State == courier.TimerDelivered
		}, 10*time.Second, 50*time.Millisecond, "%s is recorded delivered", id)
	}
}

// A callback that keeps failing spends the type's budget and the timer fails for good, with
// its attempts counted, in both modes; the type's failure target receives a signed
// timer.failed event; the timer is listed as failed and redelivered (a new delivery id) once
// the receiver answers again.
func TestTimerFailureNotifyAndRedeliver(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv, url, secret := newBucketReceiver(t)
	ctx := t.Context()
	for _, mode := range []courier.TimerMode{courier.TimerModeBucketed, courier.TimerModeWorkflow} {
		_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "pay." + string(mode), Delivery: courier.DeliveryHTTP,
			CallbackURL: url, Secrets: []string{secret}, TimerMode: mode, MaxAttempts: 3,
			RetryInitial: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond, FailureURL: url + "/failed"})
		require.NoError(t, err)
	}
	s.timerWorker(false)
	producer, admin := s.bucketedGateway()

	for _, mode := range []courier.TimerMode{courier.TimerModeBucketed, courier.TimerModeWorkflow} {
		typ, id := "pay."+string(mode), "deduct-"+string(mode)
		rcv.set(id, http.StatusServiceUnavailable)
		_, err := producer.CreateTimer(ctx, cc.TimerRequest{BizType: typ, BizID: id, When: cc.After(500 * time.Millisecond)})
		require.NoError(t, err)
		var failed *cc.Timer
		require.Eventually(t, func() bool {
			tm, err := producer.GetTimer(ctx, typ, id)
			failed = tm
			return err == nil && tm.State == courier.TimerFailed
		}, time.Minute, 100*time.Millisecond, "%s: the budget is spent", mode)
		require.Equal(t, 3, failed.Attempts, "%s: the failed timer counts its attempts", mode)
		require.Contains(t, failed.LastError, "503")
		arr := rcv.arrivals(id)
		require.Len(t, arr, 3)
		require.Equal(t, arr[0].deliveryID, arr[2].deliveryID, "%s: every attempt of one firing has one delivery id", mode)

		var ev api.TimerFailedEvent
		require.Eventually(t, func() bool {
			for _, e := range rcv.failureEvents() {
				if e.BizID == id {
					ev = e
					return true
				}
			}
			return false
		}, 30*time.Second, 50*time.Millisecond, "%s: the failure target hears of it", mode)
		require.Equal(t, api.TimerFailedEventName, ev.Event)
		require.Equal(t, typ, ev.BizType)
		require.Equal(t, 3, ev.Attempts)
		require.Equal(t, arr[0].deliveryID, ev.DeliveryID)

		var listed []string
		require.Eventually(t, func() bool {
			listed = nil
			for tm, err := range producer.AllTimers(ctx, cc.TimerQuery{BizType: typ, State: courier.TimerFailed,
				FinishedAfter: time.Now().Add(-time.Hour)}) {
				if err != nil {
					return false
				}
				listed = append(listed, tm.BizID)
			}
			return len(listed) == 1
		}, 30*time.Second, 100*time.Millisecond, "%s: failed timers are listed by type and time", mode)
		require.Equal(t, []string{id}, listed)

		_, err = producer.RedeliverTimer(ctx, typ, id)
		require.ErrorIs(t, err, cc.ErrPermissionDenied, "redelivery is an operator's")

		rcv.set(id, 0)
		tm, err := admin.RedeliverTimer(ctx, typ, id)
		require.NoError(t, err)
		require.NotEqual(t, courier.TimerFailed, tm.State)
		require.Eventually(t, func() bool {
			tm, err := producer.GetTimer(ctx, typ, id)
			return err == nil && tm.State == courier.TimerDelivered
		}, time.Minute, 100*time.Millisecond, "%s: the redelivery succeeds", mode)
		arr = rcv.arrivals(id)
		require.Len(t, arr, 4)
		require.NotEqual(t, arr[0].deliveryID, arr[3].deliveryID, "%s: a redelivery is a new delivery", mode)
		_, err = admin.RedeliverTimer(ctx, typ, id)
		require.ErrorIs(t, err, cc.ErrConflict, "%s: only a failed timer is redelivered", mode)
	}

	// In bulk: three failed bucketed timers, redelivered by one call.
	for i := range 3 {
		rcv.set(fmt.Sprintf("bulk-%d", i), http.StatusBadRequest) // refused: failed at once
		_, err := producer.CreateTimer(ctx, cc.TimerRequest{BizType: "pay.bucketed", BizID: fmt.Sprintf("bulk-%d", i), When: cc.After(0)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		page, err := producer.ListTimers(ctx, cc.TimerQuery{BizType: "pay.bucketed", State: courier.TimerFailed})
		if err != nil {
			return false
		}
		n := len(page.Items)
		for page.NextPageToken != "" {
			if page, err = producer.ListTimers(ctx, cc.TimerQuery{BizType: "pay.bucketed", State: courier.TimerFailed, PageToken: page.NextPageToken}); err != nil {
				return false
			}
			n += len(page.Items)
		}
		return n == 3
	}, time.Minute, 100*time.Millisecond)
	for i := range 3 {
		rcv.set(fmt.Sprintf("bulk-%d", i), 0)
	}
	res, err := admin.RedeliverTimers(ctx, cc.TimerRedeliverFilter{BizType: "pay.bucketed", Max: new(2)})
	require.NoError(t, err)
	require.Equal(t, 2, res.Done)
	require.True(t, res.More)
	res, err = admin.RedeliverTimers(ctx, cc.TimerRedeliverFilter{BizType: "pay.bucketed"})
	require.NoError(t, err)
	require.Equal(t, 1, res.Done)
	require.False(t, res.More)
	require.Eventually(t, func() bool {
		for i := range 3 {
			tm, err := producer.GetTimer(ctx, "pay.bucketed", fmt.Sprintf("bulk-%d", i))
			if err != nil || tm.State != courier.TimerDelivered {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond, "every redelivered timer arrives")
}
