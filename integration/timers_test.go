package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/webhook"
)

// receiver is a business's callback endpoint: it verifies every signature and records each
// delivery by biz id with its arrival time.
type receiver struct {
	mu       sync.Mutex
	got      map[string][]time.Time
	bad      int
	verifier *webhook.Verifier
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.verifier.Verify(body, req.Header); err != nil {
		r.bad++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var cb activities.TimerCallback
	_ = json.Unmarshal(body, &cb)
	r.got[cb.BizID] = append(r.got[cb.BizID], now)
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[id])
}

// Timers end to end through the gateway: 500 timers due within two seconds are each delivered
// once, never early, with valid signatures; a cancel acknowledged just before the fire time
// never delivers; a reschedule moves the delivery; repeats are idempotent; changes after firing
// are refused with 409.
func TestTimersEndToEnd(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("order.close", 0)
	s.timerWorker(false)
	ctx := context.Background()
	_, token, err := s.store.CreateAPIKey(ctx, "orders", []courier.Scope{courier.ScopeProducer})
	require.NoError(t, err)
	gw := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
		Timers: s.timerService(), Logger: quiet}))
	t.Cleanup(gw.Close)
	call := func(method, path string, body any) (int, timers.Timer) {
		resp := do(t, method, gw.URL+path, token, body)
		var tm timers.Timer
		if resp.StatusCode < 300 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&tm))
		}
		return resp.StatusCode, tm
	}

	const n = 500
	base := time.Now().Add(10 * time.Second)
	fireAt := map[string]time.Time{}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("o-%d", i)
		at := base.Add(time.Duration(i%20) * 100 * time.Millisecond) // 500 due within two seconds
		fireAt[id] = at
		status, tm := call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": id, "fire_at": at, "payload": map[string]string{"order": id}})
		require.Equal(t, http.StatusCreated, status, id)
		require.Equal(t, "scheduled", tm.State)
	}
	// The same request again is the same timer; a different one is a conflict.
	status, _ := call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "o-0", "fire_at": fireAt["o-0"], "payload": map[string]string{"order": "o-0"}})
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "o-0", "delay": "1h", "payload": map[string]string{"order": "o-0"}})
	require.Equal(t, http.StatusConflict, status)
	status, _ = call("POST", "/v1/timers", map[string]any{"biz_type": "nope", "biz_id": "x", "delay": "1s"})
	require.Equal(t, http.StatusUnprocessableEntity, status)

	// Cancel one just before its fire time; move another two seconds later.
	status, tm := call("DELETE", "/v1/timers/order.close/o-1", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "cancelled", tm.State)
	later := fireAt["o-2"].Add(2 * time.Second)
	status, tm = call("PATCH", "/v1/timers/order.close/o-2", map[string]any{"fire_at": later})
	require.Equal(t, http.StatusOK, status)
	require.True(t, later.Truncate(time.Millisecond).Equal(tm.FireAt))
	fireAt["o-2"] = later

	require.Eventually(t, func() bool {
		for id := range fireAt {
			if id != "o-1" && rcv.count(id) == 0 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 50*time.Millisecond, "every timer but the cancelled one is delivered")

	rcv.mu.Lock()
	for id, times := range rcv.got {
		require.Len(t, times, 1, "%s delivered once", id)
		require.False(t, times[0].Before(fireAt[id].Truncate(time.Millisecond)), "%s delivered %s early", id, fireAt[id].Sub(times[0]))
	}
	require.Zero(t, rcv.bad, "every signature verified")
	require.Empty(t, rcv.got["o-1"], "the cancelled timer never fired")
	rcv.mu.Unlock()

	status, tm = call("GET", "/v1/timers/order.close/o-3", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "delivered", tm.State)
	require.Equal(t, 1, tm.Attempts)
	status, _ = call("PATCH", "/v1/timers/order.close/o-3", map[string]any{"delay": "1h"})
	require.Equal(t, http.StatusConflict, status, "a delivered timer cannot be rescheduled")
	status, _ = call("DELETE", "/v1/timers/order.close/o-3", nil)
	require.Equal(t, http.StatusConflict, status)
	status, _ = call("GET", "/v1/timers/order.close/missing", nil)
	require.Equal(t, http.StatusNotFound, status)

	// Cancels racing the fire time: whatever the outcome, an acknowledged cancel never delivers
	// and a refused one (the timer had fired) delivers exactly once.
	race := time.Now().Add(4 * time.Second)
	offsets := []time.Duration{-time.Second, -50 * time.Millisecond, -10 * time.Millisecond, 0, 20 * time.Millisecond}
	results := make([]int, len(offsets))
	for i := range offsets {
		status, _ := call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": fmt.Sprintf("race-%d", i), "fire_at": race})
		require.Equal(t, http.StatusCreated, status)
	}
	var wg sync.WaitGroup
	for i, off := range offsets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-time.After(time.Until(race.Add(off))) // send the cancel at this moment relative to the fire time
			req, _ := http.NewRequest("DELETE", fmt.Sprintf("%s/v1/timers/order.close/race-%d", gw.URL, i), nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				results[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for i, code := range results {
		id := fmt.Sprintf("race-%d", i)
		switch code {
		case http.StatusOK:
			require.Never(t, func() bool { return rcv.count(id) > 0 }, 2*time.Second, 50*time.Millisecond, "%s: an acknowledged cancel never delivers", id)
		case http.StatusConflict:
			require.Eventually(t, func() bool { return rcv.count(id) == 1 }, 30*time.Second, 50*time.Millisecond, "%s: a refused cancel means it fired", id)
		default:
			t.Fatalf("%s: cancel answered %d", id, code)
		}
	}
	require.Equal(t, http.StatusOK, results[0], "a cancel a second ahead is in time")

	require.Eventually(t, func() bool {
		resp := do(t, "GET", gw.URL+"/v1/timers?biz_type=order.close&state=cancelled", token, nil)
		var page struct{ Items []timers.Timer }
		_ = json.NewDecoder(resp.Body).Decode(&page)
		for _, it := range page.Items {
			if it.BizID == "o-1" {
				return it.State == "cancelled"
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "timers are listed by type and state")
}

// A producer arms a timer in its own transaction through the outbox: it exists only if the
// transaction commits.
func TestTimerArmedThroughTheOutbox(t *testing.T) {
	s := newStack(t, "postgres")
	rcv := s.bizType("order.close", 0)
	s.timerWorker(true)
	ctx := context.Background()

	arm := func(id string, commit bool) int64 {
		tx, err := s.store.DB().BeginTx(ctx, nil)
		require.NoError(t, err)
		rowID, err := outbox.ArmTimer(ctx, tx, outbox.Timer{BizType: "order.close", BizID: id,
			FireAt: time.Now().Add(time.Second), Payload: json.RawMessage(`{"order":"` + id + `"}`)})
		require.NoError(t, err)
		if commit {
			require.NoError(t, tx.Commit())
		} else {
			require.NoError(t, tx.Rollback())
		}
		return rowID
	}
	row := arm("o-committed", true)
	arm("o-rolled-back", false)
	bad := func() int64 {
		tx, _ := s.store.DB().BeginTx(ctx, nil)
		id, err := outbox.ArmTimer(ctx, tx, outbox.Timer{BizType: "unknown.type", BizID: "x", FireAt: time.Now()})
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		return id
	}()

	require.Eventually(t, func() bool { return rcv.count("o-committed") == 1 }, time.Minute, 50*time.Millisecond)
	rec, err := s.store.GetOutbox(ctx, row)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxSent, rec.Status)
	_, err = s.timerService().Get(ctx, "order.close", "o-rolled-back")
	require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "a rolled-back timer never exists")
	require.Eventually(t, func() bool {
		r, err := s.store.GetOutbox(ctx, bad)
		return err == nil && r.Status == courier.OutboxDead && strings.Contains(r.LastError, "unknown.type")
	}, 30*time.Second, 50*time.Millisecond, "a row for an unknown business type ends dead with the reason")
	require.Zero(t, rcv.count("o-rolled-back"))
}
