package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/dynamicconfig"
	temporalserver "go.temporal.io/server/temporal"
	"go.temporal.io/server/temporaltest"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/workflows"
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
	var cb api.TimerCallback
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
	ctx := t.Context()
	_, token, err := s.store.CreateAPIKey(ctx, "orders", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(t, err)
	gw := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
		Timers: s.timerService(), Logger: quiet}))
	t.Cleanup(gw.Close)
	call := func(method, path string, body any) (int, api.Timer) {
		resp := do(t, method, gw.URL+path, token, body)
		var tm api.Timer
		if resp.StatusCode < 300 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&tm))
		}
		return resp.StatusCode, tm
	}

	const n = 500
	base := time.Now().Add(10 * time.Second)
	fireAt := map[string]time.Time{}
	create := func(id string, at time.Time) {
		t.Helper()
		fireAt[id] = at
		status, tm := call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": id, "fire_at": at, "payload": map[string]string{"order": id}})
		require.Equal(t, http.StatusCreated, status, id)
		require.Equal(t, courier.TimerScheduled, tm.State)
	}
	for i := 0; i < n; i++ {
		if i == 1 || i == 2 {
			continue // armed last, so they are still ahead of their time however long this takes
		}
		create(fmt.Sprintf("o-%d", i), base.Add(time.Duration(i%20)*100*time.Millisecond)) // 500 due within two seconds
	}
	soon := time.Now().Add(5 * time.Second)
	create("o-1", soon)
	create("o-2", soon.Add(100*time.Millisecond))
	// The same request again is the same timer; a different one is a conflict.
	status, _ := call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "o-0", "fire_at": fireAt["o-0"], "payload": map[string]string{"order": "o-0"}})
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "o-0", "delay": "1h", "payload": map[string]string{"order": "o-0"}})
	require.Equal(t, http.StatusConflict, status)
	status, _ = call("POST", "/v1/timers", map[string]any{"biz_type": "nope", "biz_id": "x", "delay": "1s"})
	require.Equal(t, http.StatusUnprocessableEntity, status)

	// Cancel one a few seconds before its fire time; move another two seconds later.
	status, tm := call("DELETE", "/v1/timers/order.close/o-1", nil)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, courier.TimerCancelled, tm.State)
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

	// A callback is received before its activity's completion reaches the timer's run.
	require.Eventually(t, func() bool {
		status, tm = call("GET", "/v1/timers/order.close/o-3", nil)
		require.Equal(t, http.StatusOK, status)
		return tm.State == courier.TimerDelivered
	}, 30*time.Second, 50*time.Millisecond, "o-3 reads as delivered")
	require.Equal(t, 1, tm.Attempts)
	status, _ = call("PATCH", "/v1/timers/order.close/o-3", map[string]any{"delay": "1h"})
	require.Equal(t, http.StatusConflict, status, "a delivered timer cannot be rescheduled")
	status, _ = call("DELETE", "/v1/timers/order.close/o-3", nil)
	require.Equal(t, http.StatusConflict, status)
	status, _ = call("GET", "/v1/timers/order.close/missing", nil)
	require.Equal(t, http.StatusNotFound, status)

	// Cancels racing the fire time: whatever the outcome, an acknowledged cancel never delivers
	// and a refused one (the timer had fired) delivers exactly once.
	race := time.Now().Add(6 * time.Second)
	offsets := []time.Duration{-3 * time.Second, -50 * time.Millisecond, -10 * time.Millisecond, 0, 20 * time.Millisecond}
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
	require.Equal(t, http.StatusOK, results[0], "a cancel 3 s ahead is in time")

	require.Eventually(t, func() bool {
		resp := do(t, "GET", gw.URL+"/v1/timers?biz_type=order.close&state=cancelled", token, nil)
		var page struct{ Items []api.Timer }
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
	ctx := t.Context()

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
	// The relay marks the row sent after it created the timer, which may already have fired.
	require.Eventually(t, func() bool {
		rec, err := s.store.GetOutbox(ctx, row)
		require.NoError(t, err)
		return rec.Status == courier.OutboxSent
	}, 30*time.Second, 50*time.Millisecond, "the committed row is marked sent")
	_, err := s.timerService().Get(ctx, "order.close", "o-rolled-back")
	require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "a rolled-back timer never exists")
	require.Eventually(t, func() bool {
		r, err := s.store.GetOutbox(ctx, bad)
		return err == nil && r.Status == courier.OutboxDead && strings.Contains(r.LastError, "unknown.type")
	}, 30*time.Second, 50*time.Millisecond, "a row for an unknown business type ends dead with the reason")
	require.Zero(t, rcv.count("o-rolled-back"))
}

// timerAPI is the real gateway serving the stack's timer service, called with a producer key.
type timerAPI struct {
	t     *testing.T
	url   string
	token string
}

func (s *stack) timerAPI(svc *timers.Service) *timerAPI {
	s.t.Helper()
	_, token, err := s.store.CreateAPIKey(s.t.Context(), "timers-"+s.t.Name(), []apikey.Scope{apikey.ScopeProducer})
	require.NoError(s.t, err)
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
		Timers: svc, Schedules: svc, Logger: quiet}))
	s.t.Cleanup(srv.Close)
	return &timerAPI{t: s.t, url: srv.URL, token: token}
}

// call sends a request (path as written, already escaped) and decodes a 2xx body into out and an
// error body into the returned ErrorBody.
func (a *timerAPI) call(method, path string, body, out any) (int, api.ErrorBody) {
	a.t.Helper()
	resp := do(a.t, method, a.url+path, a.token, body)
	var eb api.ErrorBody
	switch {
	case resp.StatusCode >= 300:
		require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&eb), "%s %s: error bodies are JSON", method, path)
		require.NotEmpty(a.t, eb.Error.Code)
	case out != nil && resp.StatusCode != http.StatusNoContent:
		require.NoError(a.t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode, eb
}

func (a *timerAPI) timer(method, path string, body any) (int, api.Timer, api.ErrorBody) {
	a.t.Helper()
	var tm api.Timer
	status, eb := a.call(method, path, body, &tm)
	return status, tm, eb
}

// Any id the id rule allows works end to end, whatever its characters: create, get,
// reschedule, list (real biz_id), a visibility search by CourierBizID, cancel, delivery; and a
// schedule with such an id. Ids breaking the rule are 400 naming the field.
func TestTimerNonASCIIIDs(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("order.close", 0)
	s.timerWorker(false)
	gw := s.timerAPI(s.timerService())
	ctx := t.Context()

	const id = "заказ-✓"
	path := "/v1/timers/order.close/" + url.PathEscape(id)
	status, tm, eb := gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": id, "delay": "1h"})
	require.Equal(t, http.StatusCreated, status, eb)
	require.Equal(t, id, tm.BizID)
	status, tm, eb = gw.timer("GET", path, nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, id, tm.BizID)
	require.Equal(t, courier.TimerScheduled, tm.State)
	later := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	status, tm, eb = gw.timer("PATCH", path, map[string]any{"fire_at": later})
	require.Equal(t, http.StatusOK, status, eb)
	require.True(t, later.Equal(tm.FireAt))

	require.Eventually(t, func() bool {
		var page struct{ Items []api.Timer }
		status, _ := gw.call("GET", "/v1/timers?biz_type=order.close&state=scheduled", nil, &page)
		return status == http.StatusOK && len(page.Items) == 1 && page.Items[0].BizID == id && page.Items[0].FireAt.Equal(later)
	}, 30*time.Second, 100*time.Millisecond, "the list shows the real biz_id and the new fire time")
	// The query an operator types in the Temporal UI.
	resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: s.ts.GetDefaultNamespace(), Query: fmt.Sprintf("%s = '%s'", courier.SABizID, id)})
	require.NoError(t, err)
	require.Len(t, resp.GetExecutions(), 1)
	require.Equal(t, courier.TimerWorkflowID("order.close", id), resp.GetExecutions()[0].GetExecution().GetWorkflowId())

	status, tm, eb = gw.timer("DELETE", path, nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)

	// Spaces, '%', '?', '#', '+' and CJK survive paths, Temporal ids and the callback.
	const odd = "订单 100% ?#+ ✓"
	status, _, eb = gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": odd, "delay": "1s", "payload": map[string]string{"k": "v"}})
	require.Equal(t, http.StatusCreated, status, eb)
	require.Eventually(t, func() bool { return rcv.count(odd) == 1 }, time.Minute, 50*time.Millisecond, "delivered with its real biz_id")
	// The callback is received before its activity's completion reaches the timer's run.
	require.Eventually(t, func() bool {
		status, tm, eb = gw.timer("GET", "/v1/timers/order.close/"+url.PathEscape(odd), nil)
		require.Equal(t, http.StatusOK, status, eb)
		return tm.State == courier.TimerDelivered
	}, 30*time.Second, 50*time.Millisecond, "the timer reads as delivered")

	for name, c := range map[string]struct {
		method, path string
		body         any
		field        string
	}{
		"slash in body":      {"POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "a/b", "delay": "1h"}, "biz_id"},
		"empty in body":      {"POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "", "delay": "1h"}, "biz_id"},
		"invisible in body":  {"POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "a\u200bb", "delay": "1h"}, "biz_id"},
		"control in body":    {"POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "a\nb", "delay": "1h"}, "biz_id"},
		"too long in body":   {"POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": strings.Repeat("я", 65), "delay": "1h"}, "biz_id"},
		"slash in path":      {"GET", "/v1/timers/order.close/a%2Fb", nil, "biz_id"},
		"dot-dot in path":    {"DELETE", "/v1/timers/order.close/%2E%2E", nil, "biz_id"},
		"bad UTF-8 in path":  {"GET", "/v1/timers/order.close/%FF", nil, "biz_id"},
		"bad escape in path": {"PATCH", "/v1/timers/order.close/%E2%9C", map[string]any{"delay": "1h"}, "biz_id"},
		"schedule slash":     {"PUT", "/v1/schedules/a%2Fb", map[string]any{"biz_type": "order.close", "interval": "1h"}, "id"},
		"schedule control":   {"GET", "/v1/schedules/a%09b", nil, "id"},
	} {
		status, eb := gw.call(c.method, c.path, c.body, nil)
		require.Equal(t, http.StatusBadRequest, status, name)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code, name)
		require.Equal(t, c.field, eb.Error.Details["field"], name)
	}

	// A schedule with a non-ASCII id: create, get, pause, unpause, trigger (delivers with the
	// real id), delete.
	const sid = "дайджест-✓"
	spath := "/v1/schedules/" + url.PathEscape(sid)
	var sc api.Schedule
	status, eb = gw.call("PUT", spath, map[string]any{"biz_type": "order.close", "interval": "1h", "paused": true}, &sc)
	require.Equal(t, http.StatusCreated, status, eb)
	require.Equal(t, sid, sc.ID)
	status, eb = gw.call("GET", spath, nil, &sc)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, sid, sc.ID)
	require.True(t, sc.Paused)
	status, eb = gw.call("POST", spath+"/unpause", map[string]string{"note": "back"}, &sc)
	require.Equal(t, http.StatusOK, status, eb)
	require.False(t, sc.Paused)
	status, eb = gw.call("POST", spath+"/pause", map[string]string{"note": "still ✓"}, &sc)
	require.Equal(t, http.StatusOK, status, eb)
	require.True(t, sc.Paused)
	require.Equal(t, "still ✓", sc.Note)
	status, eb = gw.call("POST", spath+"/trigger", nil, &sc)
	require.Equal(t, http.StatusOK, status, eb)
	require.Eventually(t, func() bool { return rcv.count(sid) == 1 }, time.Minute, 50*time.Millisecond, "a run delivers with the real schedule id")
	status, eb = gw.call("DELETE", spath, nil, nil)
	require.Equal(t, http.StatusNoContent, status, eb)
	require.Eventually(t, func() bool {
		status, _ := gw.call("GET", spath, nil, nil)
		return status == http.StatusNotFound
	}, 10*time.Second, 100*time.Millisecond)
	require.Zero(t, rcv.bad)
}

// A percent-encoded id in the path is decoded exactly once: DELETE …/order%3A42 cancels the
// timer order:42, which then never fires.
func TestTimerCancelPercentEncodedID(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("t", 0)
	s.timerWorker(false)
	gw := s.timerAPI(s.timerService())

	fireAt := time.Now().Add(8 * time.Second) // time enough for the create and the cancel on a busy machine
	status, _, eb := gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "t", "biz_id": "order:42", "fire_at": fireAt})
	require.Equal(t, http.StatusCreated, status, eb)
	status, tm, eb := gw.timer("DELETE", "/v1/timers/t/order%3A42", nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, "order:42", tm.BizID)
	require.Equal(t, courier.TimerCancelled, tm.State)
	status, tm, eb = gw.timer("GET", "/v1/timers/t/order:42", nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
	require.Never(t, func() bool { return rcv.count("order:42") > 0 }, time.Until(fireAt)+2*time.Second, 100*time.Millisecond,
		"the cancelled timer never fires")
}

// A page token courier did not issue is 400 at once (not a retried server error and a 500);
// real tokens page through every timer.
func TestTimerListPageTokens(t *testing.T) {
	s := newStack(t, "sqlite")
	s.bizType("order.close", 0)
	gw := s.timerAPI(s.timerService())
	for i := 0; i < 5; i++ {
		status, _, eb := gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": fmt.Sprintf("p-%d", i), "delay": "1h"})
		require.Equal(t, http.StatusCreated, status, eb)
	}
	type page struct {
		Items         []api.Timer `json:"items"`
		NextPageToken string      `json:"next_page_token"`
	}
	var first page
	require.Eventually(t, func() bool {
		status, _ := gw.call("GET", "/v1/timers?biz_type=order.close", nil, &first)
		return status == http.StatusOK && len(first.Items) == 5
	}, 30*time.Second, 100*time.Millisecond)

	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		var p page
		status, eb := gw.call("GET", "/v1/timers?biz_type=order.close&limit=2&page_token="+url.QueryEscape(token), nil, &p)
		require.Equal(t, http.StatusOK, status, eb)
		for _, it := range p.Items {
			seen[it.BizID] = true
		}
		if p.NextPageToken == "" {
			break
		}
		if token == "" {
			// A real token is tied to its query: another filter refuses it.
			status, eb := gw.call("GET", "/v1/timers?biz_type=other&limit=2&page_token="+url.QueryEscape(p.NextPageToken), nil, nil)
			require.Equal(t, http.StatusBadRequest, status)
			require.Equal(t, "page_token", eb.Error.Details["field"])
		}
		token = p.NextPageToken
	}
	require.Len(t, seen, 5, "pages cover every timer once")

	for _, garbage := range []string{"garbage", "Z2FyYmFnZQ", "AAAAAAAAAAAAAAAAAAAAAAAA", "!!", "eyJ2IjoxfQ"} {
		start := time.Now()
		status, eb := gw.call("GET", "/v1/timers?page_token="+url.QueryEscape(garbage), nil, nil)
		require.Equal(t, http.StatusBadRequest, status, garbage)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code, garbage)
		require.Equal(t, "page_token", eb.Error.Details["field"], garbage)
		require.Less(t, time.Since(start), 2*time.Second, "%s is refused at once", garbage)
	}
}

// A create with a delay is idempotent like one with a fire time: the same body again returns the
// timer the first one created (200, its fire time unchanged), however much later it arrives.
// "The same" means the same delay, compared as a duration, and the same payload; a different
// delay, payload or a fire_at instead of the delay is a different request (409).
func TestTimerCreateWithDelayIsIdempotent(t *testing.T) {
	s := newStack(t, "sqlite")
	s.bizType("order.close", 0)
	s.timerWorker(false)
	gw := s.timerAPI(s.timerService())

	body := func(delay string, payload any) map[string]any {
		return map[string]any{"biz_type": "order.close", "biz_id": "d-1", "delay": delay, "payload": payload}
	}
	status, first, eb := gw.timer("POST", "/v1/timers", body("30m", map[string]string{"order": "d-1"}))
	require.Equal(t, http.StatusCreated, status, eb)
	for _, delay := range []string{"30m", "1800s"} {
		status, again, eb := gw.timer("POST", "/v1/timers", body(delay, map[string]string{"order": "d-1"}))
		require.Equal(t, http.StatusOK, status, "delay %s: %v", delay, eb)
		require.Equal(t, courier.TimerScheduled, again.State)
		require.True(t, first.FireAt.Equal(again.FireAt), "the existing timer keeps its fire time: %s, then %s", first.FireAt, again.FireAt)
		require.Equal(t, first.WorkflowID, again.WorkflowID)
	}
	for name, b := range map[string]map[string]any{
		"another delay":   body("31m", map[string]string{"order": "d-1"}),
		"another payload": body("30m", map[string]string{"order": "d-2"}),
		"fire_at instead": {"biz_type": "order.close", "biz_id": "d-1", "fire_at": first.FireAt, "payload": map[string]string{"order": "d-1"}},
	} {
		status, _, eb := gw.timer("POST", "/v1/timers", b)
		require.Equal(t, http.StatusConflict, status, name)
		require.Equal(t, courier.CodeConflict, eb.Error.Code, name)
	}
}

// lowUpdateLimits has the test server refuse a timer run's 21st update and suggest continuing as
// new from its 10th, as a production server does at 2,000 and 1,800.
func lowUpdateLimits() temporaltest.TestServerOption {
	return temporaltest.WithBaseServerOptions(temporalserver.WithDynamicConfigClient(dynamicconfig.StaticClient{
		// temporaltest's own setting, which this client replaces.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():                       true,
		dynamicconfig.WorkflowExecutionMaxTotalUpdates.Key():                              20,
		dynamicconfig.WorkflowExecutionMaxTotalUpdatesSuggestContinueAsNewThreshold.Key(): 0.5,
	}))
}

// lowRunLimits has the test server suggest continuing as new as lowUpdateLimits does, and also
// once a run's history passes 60 events (a production server: 4,096), which a timer whose
// changes come as signals reaches after about eight reschedules.
func lowRunLimits() temporaltest.TestServerOption {
	return temporaltest.WithBaseServerOptions(temporalserver.WithDynamicConfigClient(dynamicconfig.StaticClient{
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():                       true,
		dynamicconfig.WorkflowExecutionMaxTotalUpdates.Key():                              20,
		dynamicconfig.WorkflowExecutionMaxTotalUpdatesSuggestContinueAsNewThreshold.Key(): 0.5,
		dynamicconfig.HistoryCountSuggestContinueAsNew.Key():                              60,
	}))
}

// A timer takes any number of reschedules: past what the server lets one run hold it carries on
// in new runs of the same workflow, Get and List follow it, and a final cancel is acknowledged
// and wins (the timer never fires).
func TestTimerManyReschedulesThenCancel(t *testing.T) {
	s := newStack(t, "sqlite", lowRunLimits())
	rcv := s.bizType("order.close", 0)
	s.timerWorker(false)
	gw := s.timerAPI(s.timerService())
	ctx := t.Context()

	const id = "many-1"
	path := "/v1/timers/order.close/" + id
	create := map[string]any{"biz_type": "order.close", "biz_id": id, "fire_at": time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond),
		"payload": map[string]string{"order": id}}
	status, _, eb := gw.timer("POST", "/v1/timers", create)
	require.Equal(t, http.StatusCreated, status, eb)

	const n = 60 // three times the server's per-run limit
	for i := 1; i <= n; i++ {
		at := time.Now().Add(time.Hour + time.Duration(i)*time.Second).UTC().Truncate(time.Millisecond)
		status, tm, eb := gw.timer("PATCH", path, map[string]any{"fire_at": at})
		require.Equal(t, http.StatusOK, status, "reschedule %d: %v", i, eb)
		require.Equal(t, i, tm.Version, "reschedule %d", i)
		require.True(t, at.Equal(tm.FireAt), "reschedule %d", i)
		if i%7 == 0 {
			status, tm, eb = gw.timer("GET", path, nil)
			require.Equal(t, http.StatusOK, status, "get after %d: %v", i, eb)
			require.Equal(t, courier.TimerScheduled, tm.State)
			require.Equal(t, i, tm.Version, "Get reads the current run")
			require.True(t, at.Equal(tm.FireAt), "get after %d", i)
		}
	}
	wid := courier.TimerWorkflowID("order.close", id)
	require.Eventually(t, func() bool {
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.ts.GetDefaultNamespace(), Query: fmt.Sprintf("WorkflowId = '%s'", wid)})
		return err == nil && len(resp.GetExecutions()) >= n/20
	}, 30*time.Second, 100*time.Millisecond, "the timer went through several runs")

	// Due in a few seconds, then cancelled: the cancel is acknowledged and the timer never fires.
	fireAt := time.Now().Add(8 * time.Second).UTC().Truncate(time.Millisecond)
	status, _, eb = gw.timer("PATCH", path, map[string]any{"fire_at": fireAt})
	require.Equal(t, http.StatusOK, status, eb)
	status, tm, eb := gw.timer("DELETE", path, nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
	require.Equal(t, n+2, tm.Version)
	require.Never(t, func() bool { return rcv.count(id) > 0 }, time.Until(fireAt)+2*time.Second, 100*time.Millisecond,
		"the cancelled timer never fires")
	status, tm, eb = gw.timer("GET", path, nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
	require.Equal(t, n+2, tm.Version)

	// The list shows the timer once (not once per run), and a repeat of the original create is
	// still recognised.
	require.Eventually(t, func() bool {
		var page struct{ Items []api.Timer }
		status, _ := gw.call("GET", "/v1/timers?biz_type=order.close", nil, &page)
		return status == http.StatusOK && len(page.Items) == 1 && page.Items[0].State == "cancelled"
	}, 30*time.Second, 100*time.Millisecond, "one list entry, cancelled")
	status, tm, eb = gw.timer("POST", "/v1/timers", create)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
}

// rowlessTimerService is a timer service without courier's database: its timers of their own
// live in Temporal only, as every timer did before rows were kept (runs still open from then
// take their changes as updates).
func (s *stack) rowlessTimerService() *timers.Service {
	return timers.New(s.tc, s.ts.GetDefaultNamespace(), s.store, nil, relay.DefaultTaskQueue)
}

// A timer without a row (armed before rows were kept, or by a service without them) takes its
// changes as workflow updates: with no worker running, a reschedule, a cancel or a Get of a
// scheduled one is answered 503 unavailable with Retry-After once the service's update timeout
// passes, instead of waiting for a worker. Once a worker runs, a repeated cancel is answered
// with the timer's state: cancelling a cancelled timer is 200 (every time), cancelling a fired
// one is 409 naming its state; a service with rows answers for it the same way.
func TestTimerUpdatesWithoutWorker(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("order.close", 0)
	svc := s.rowlessTimerService()
	svc.UpdateTimeout = time.Second
	gw := s.timerAPI(svc)

	status, _, eb := gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "w-1", "delay": "1h"})
	require.Equal(t, http.StatusCreated, status, eb)
	for _, c := range []struct {
		method string
		body   any
	}{{"PATCH", map[string]any{"delay": "2h"}}, {"DELETE", nil}, {"GET", nil}} {
		resp := do(t, c.method, gw.url+"/v1/timers/order.close/w-1", gw.token, c.body)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, c.method)
		var eb api.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
		require.Equal(t, courier.CodeUnavailable, eb.Error.Code, c.method)
		require.Contains(t, eb.Error.Message, "worker", c.method)
		require.NotEmpty(t, resp.Header.Get("Retry-After"), c.method)
	}

	s.timerWorker(false)
	// A worker that has just started works through the queued updates first: the service's
	// default wait, not the 1 s above, is what callers get from here on. The timer has no row,
	// so a service with rows reaches its run as the rowless one does.
	gw = s.timerAPI(s.timerService())
	for i := range 3 {
		status, tm, eb := gw.timer("DELETE", "/v1/timers/order.close/w-1", nil)
		require.Equal(t, http.StatusOK, status, "cancel %d: %v", i, eb)
		require.Equal(t, courier.TimerCancelled, tm.State, "cancel %d", i)
	}
	status, tm, eb := gw.timer("GET", "/v1/timers/order.close/w-1", nil)
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
	// Its create repeated through a service with rows is recognised as that timer (its run's
	// memo), another create under its key is refused, and neither leaves a row behind.
	status, tm, eb = gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "w-1", "delay": "1h"})
	require.Equal(t, http.StatusOK, status, eb)
	require.Equal(t, courier.TimerCancelled, tm.State)
	status, _, _ = gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "w-1", "delay": "2h"})
	require.Equal(t, http.StatusConflict, status)
	_, err := s.store.GetTimerRecord(t.Context(), "order.close", "w-1")
	require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "no row shadows the run")

	gw = s.timerAPI(s.rowlessTimerService())
	status, _, eb = gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "w-2", "delay": "0s"})
	require.Equal(t, http.StatusCreated, status, eb)
	require.Eventually(t, func() bool {
		status, tm, _ := gw.timer("GET", "/v1/timers/order.close/w-2", nil)
		return status == http.StatusOK && tm.State == "delivered"
	}, time.Minute, 50*time.Millisecond)
	for i := range 2 {
		status, _, eb := gw.timer("DELETE", "/v1/timers/order.close/w-2", nil)
		require.Equal(t, http.StatusConflict, status, "cancel %d", i)
		require.Equal(t, "delivered", eb.Error.Details["state"], "cancel %d", i)
	}
	require.Equal(t, 1, rcv.count("w-2"))
	require.Zero(t, rcv.count("w-1"))
}

// The engine's queue backed up (issue 35: a timer's first workflow task waited 15 s, past the
// gateway's update deadline): here no worker polls at all, so no timer's run has taken its
// first workflow task. Cancels and reschedules are answered at once and for good by courier's
// database, never 503 ("a change may still take effect"), and GET and list show what was
// decided. Once a worker runs, the cancelled timer never delivers and the rescheduled ones
// deliver at their new times, never early: one moved later, past its old fire time, which
// passes before the worker starts; one moved an hour earlier.
func TestTimerChangesAnsweredWithoutAWorker(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, dialect)
			rcv := s.bizType("order.close", 0)
			svc := s.timerService()
			svc.UpdateTimeout = time.Second // a change that waited for the run would be 503 after it
			gw := s.timerAPI(svc)
			ctx := t.Context()
			path := func(id string) string { return "/v1/timers/order.close/" + id }

			due := time.Now().Add(2 * time.Second).UTC().Truncate(time.Millisecond)
			for id, at := range map[string]time.Time{"cancelled": due, "later": due, "earlier": due.Add(time.Hour)} {
				status, _, eb := gw.timer("POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": id, "fire_at": at})
				require.Equal(t, http.StatusCreated, status, eb)
			}
			later, earlier := due.Add(5*time.Second), due.Add(4*time.Second)

			status, tm, eb := gw.timer("DELETE", path("cancelled"), nil)
			require.Equal(t, http.StatusOK, status, eb)
			require.Equal(t, courier.TimerCancelled, tm.State)
			require.Equal(t, 1, tm.Version)
			status, tm, eb = gw.timer("PATCH", path("later"), map[string]any{"fire_at": later})
			require.Equal(t, http.StatusOK, status, eb)
			require.Equal(t, courier.TimerScheduled, tm.State)
			require.True(t, later.Equal(tm.FireAt))
			status, tm, eb = gw.timer("PATCH", path("earlier"), map[string]any{"fire_at": earlier})
			require.Equal(t, http.StatusOK, status, eb)
			require.True(t, earlier.Equal(tm.FireAt))
			require.Equal(t, 1, tm.Version)
			// Decided: a repeated cancel answers the same, a change of a cancelled timer is refused.
			status, tm, eb = gw.timer("DELETE", path("cancelled"), nil)
			require.Equal(t, http.StatusOK, status, eb)
			require.Equal(t, courier.TimerCancelled, tm.State)
			status, _, eb = gw.timer("PATCH", path("cancelled"), map[string]any{"delay": "1h"})
			require.Equal(t, http.StatusConflict, status)
			require.Equal(t, "cancelled", eb.Error.Details["state"])

			// GET and list show the decided state, though no run has heard of it yet.
			for id, want := range map[string]struct {
				state  courier.TimerState
				fireAt time.Time
			}{"cancelled": {courier.TimerCancelled, due}, "later": {courier.TimerScheduled, later}, "earlier": {courier.TimerScheduled, earlier}} {
				status, tm, eb := gw.timer("GET", path(id), nil)
				require.Equal(t, http.StatusOK, status, "%s: %v", id, eb)
				require.Equal(t, want.state, tm.State, id)
				require.True(t, want.fireAt.Equal(tm.FireAt), "%s: %s", id, tm.FireAt)
				require.Equal(t, courier.TimerWorkflowID("order.close", id), tm.WorkflowID)
			}
			listed := func(state string) map[string]api.Timer {
				var page struct{ Items []api.Timer }
				status, eb := gw.call("GET", "/v1/timers?biz_type=order.close&state="+state, nil, &page)
				require.Equal(t, http.StatusOK, status, eb)
				out := map[string]api.Timer{}
				for _, it := range page.Items {
					out[it.BizID] = it
				}
				return out
			}
			require.Equal(t, []string{"cancelled"}, slices.Collect(maps.Keys(listed("cancelled"))))
			scheduled := listed("scheduled")
			require.Len(t, scheduled, 2)
			require.True(t, later.Equal(scheduled["later"].FireAt))
			require.True(t, earlier.Equal(scheduled["earlier"].FireAt))

			// No run has taken a workflow task: every answer above came without one.
			for _, id := range []string{"cancelled", "later", "earlier"} {
				it := s.tc.GetWorkflowHistory(ctx, courier.TimerWorkflowID("order.close", id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
				for it.HasNext() {
					ev, err := it.Next()
					require.NoError(t, err)
					require.NotEqual(t, enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED, ev.GetEventType(), "%s: its run took a workflow task", id)
				}
			}

			// The engine catches up after the old fire time has passed: hold the worker until then.
			<-time.After(time.Until(due.Add(500 * time.Millisecond)))
			s.timerWorker(false)
			require.Eventually(t, func() bool { return rcv.count("later") == 1 && rcv.count("earlier") == 1 },
				time.Minute, 50*time.Millisecond, "the rescheduled timers are delivered")
			rcv.mu.Lock()
			gotLater, gotEarlier := rcv.got["later"][0], rcv.got["earlier"][0]
			rcv.mu.Unlock()
			require.False(t, gotLater.Before(later), "delivered %s before its new fire time", later.Sub(gotLater))
			require.False(t, gotEarlier.Before(earlier), "delivered %s before its new fire time", earlier.Sub(gotEarlier))

			id := courier.TimerWorkflowID("order.close", "cancelled")
			var st workflows.TimerSnapshot
			require.NoError(t, s.tc.GetWorkflow(ctx, id, "").Get(ctx, &st), "the cancelled timer's run ends")
			require.Equal(t, courier.TimerCancelled, st.State)
			require.Zero(t, rcv.count("cancelled"), "the cancelled timer never delivers")
			require.Eventually(t, func() bool {
				for _, id := range []string{"later", "earlier"} {
					_, tm, _ := gw.timer("GET", path(id), nil)
					if tm.State != courier.TimerDelivered || tm.Attempts != 1 {
						return false
					}
				}
				return true
			}, 30*time.Second, 50*time.Millisecond, "GET shows them delivered at their first attempt")
			require.Len(t, listed("delivered"), 2)
			require.Equal(t, 1, rcv.count("later"))
			require.Equal(t, 1, rcv.count("earlier"))
			require.Zero(t, rcv.count("cancelled"))
		})
	}
}

// What the sweep heals for timers of their own: a row whose run never started (a create whose
// start was lost) and a row moved earlier whose signal was lost (the run sleeps until the old
// fire time, an hour away). Both are 30 s overdue and untouched for as long, so the sweep
// signals (or starts) their runs, which deliver them once.
func TestTimerRunSweep(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("order.close", 0)
	ctx := t.Context()
	svc := s.timerService()
	gone := time.Now().Add(-40 * time.Second).UTC().Truncate(time.Millisecond)
	_, err := s.store.InsertTimers(ctx, []courier.TimerRecord{{BizType: "order.close", BizID: "no-run", FireAt: gone,
		Payload: []byte(`{}`), RequestHash: "h", Mode: courier.TimerModeWorkflow}})
	require.NoError(t, err)
	_, _, err = svc.Create(ctx, api.TimerRequest{BizType: "order.close", BizID: "moved", When: api.After(time.Hour)})
	require.NoError(t, err)
	_, changed, err := s.store.RescheduleTimerRecord(ctx, "order.close", "moved", gone) // no signal: lost
	require.NoError(t, err)
	require.True(t, changed)
	_, err = s.store.DB().ExecContext(ctx, "UPDATE courier_timers SET updated_at = fire_at") // as if 40 s ago
	require.NoError(t, err)

	s.timerWorker(false) // its sweep runs at once
	for _, id := range []string{"no-run", "moved"} {
		require.Eventually(t, func() bool {
			rec, err := s.store.GetTimerRecord(ctx, "order.close", id)
			return err == nil && rec.State == courier.TimerDelivered && rcv.count(id) == 1
		}, time.Minute, 50*time.Millisecond, "%s is delivered", id)
	}
	require.Equal(t, 1, rcv.count("no-run"))
	require.Equal(t, 1, rcv.count("moved"))
}

// TestTimerFollowsItsTypeAtOnce: the worker keeps business types in memory, yet a fire after a
// change of its type uses the new settings: changed through this process's store (SQLite), or
// through another process's (PostgreSQL, where the change is announced by notification).
func TestTimerFollowsItsTypeAtOnce(t *testing.T) {
	for _, dialect := range testenv.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := newStack(t, dialect)
			first := s.bizType("order.close", 0)
			s.timerWorker(false)
			ctx := t.Context()
			svc := s.timerService()
			fire := func(id string) {
				t.Helper()
				_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "order.close", BizID: id, When: api.At(time.Now().Add(time.Second))})
				require.NoError(t, err)
			}
			fire("before")
			require.Eventually(t, func() bool { return first.count("before") == 1 }, time.Minute, 20*time.Millisecond)

			// Another receiver, with its own signing secret, replaces the first.
			secret, err := webhook.GenerateSecret()
			require.NoError(t, err)
			verifier, err := webhook.NewVerifier(secret)
			require.NoError(t, err)
			second := &receiver{got: map[string][]time.Time{}, verifier: verifier}
			changer := s.store
			if dialect == "postgres" {
				changer, err = store.Open(ctx, s.dsn) // another process's connection pool
				require.NoError(t, err)
				t.Cleanup(func() { changer.Close() })
			}
			_, _, err = changer.PutBizType(ctx, courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP,
				CallbackURL: startHTTP(t, second), Secrets: []string{secret}})
			require.NoError(t, err)
			fire("after") // a second away: the notification takes milliseconds
			require.Eventually(t, func() bool { return second.count("after") == 1 }, time.Minute, 20*time.Millisecond,
				"the fire after the change reaches the new receiver, signed with the new secret")
			require.Zero(t, first.count("after"), "nothing reaches the old receiver after the change")
			second.mu.Lock()
			defer second.mu.Unlock()
			require.Zero(t, second.bad, "every callback verifies with the new secret")
		})
	}
}
