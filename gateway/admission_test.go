package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tasks"
)

// Rates in these tests are tiny (one token per 1000 s), so what is admitted is decided by the
// burst alone, however slow the machine: no timing assertions.
const tinyRate = 0.001

// recordingTimers is a timer service that records what reached it.
type recordingTimers struct {
	gateway.TimerService
	mu      sync.Mutex
	created []string
}

func (r *recordingTimers) Create(_ context.Context, req api.TimerRequest) (api.Timer, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.created = append(r.created, req.BizType+"/"+req.BizID)
	at, _, _ := req.When.Resolve(time.Now())
	return api.Timer{BizType: req.BizType, BizID: req.BizID, State: "scheduled", FireAt: at,
		WorkflowID: "timer/" + req.BizType + "/" + req.BizID}, true, nil
}

func (r *recordingTimers) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.created)
}

type admissionFixture struct {
	*fixture
	timers *recordingTimers
}

// setupAdmission serves a gateway on a real store of the given dialect, with the real task
// service (inserts only: no Temporal needed), a recording timer service, the admission metrics
// on /metrics and keyRate as the default key rate.
func setupAdmission(t *testing.T, dialect string, keyRate courier.Rate) *admissionFixture {
	t.Helper()
	st, _ := testenv.Store(t, dialect)
	reg := prometheus.NewRegistry()
	rt := &recordingTimers{}
	h := gateway.New(gateway.Config{KeyRate: keyRate}, gateway.Deps{
		Keys: st, Outbox: st, BizTypes: st, Timers: rt,
		Tasks:     tasks.NewService(st, nil, "", nil, nil, nil),
		Gatherer:  reg,
		Admission: metrics.NewAdmission(reg),
	})
	srv := newServer(t, h)
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL, st: st}
	f.admin = newKey(t, st, "admin", apikey.ScopeAdmin, &courier.Rate{}) // unlimited: configuration never throttled here
	return &admissionFixture{fixture: f, timers: rt}
}

func newKey(t *testing.T, st *store.Store, name string, scope apikey.Scope, rate *courier.Rate) string {
	t.Helper()
	_, tok, err := st.NewAPIKey(t.Context(), apikey.Key{Name: name, Scopes: []apikey.Scope{scope}, Rate: rate})
	require.NoError(t, err)
	return tok
}

func keyID(token string) string {
	// ck_<id hex>_<secret>: the id is key_<id hex>.
	return "key_" + strings.Split(token, "_")[1]
}

// send makes one request and returns the status, the Retry-After header and the error body.
func (f *admissionFixture) send(t *testing.T, method, path, token, body string) (int, string, api.ErrorBody) {
	t.Helper()
	var r io.Reader
	ct := ""
	if body != "" {
		r, ct = strings.NewReader(body), "application/json"
	}
	resp, eb := f.do(t, method, path, token, ct, r)
	return resp.StatusCode, resp.Header.Get("Retry-After"), eb
}

// refusedMetric reads courier_admission_refused_total{reason,name} from /metrics.
func (f *admissionFixture) refusedMetric(t *testing.T, reason, name string) float64 {
	t.Helper()
	resp, err := http.Get(f.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	prefix := `courier_admission_refused_total{name="` + name + `",reason="` + reason + `"} `
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

func requireRateLimited(t *testing.T, status int, retryAfter string, eb api.ErrorBody, code courier.Code, maxWait int) {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, status, "%+v", eb)
	require.Equal(t, code, eb.Error.Code)
	require.NotEmpty(t, eb.Error.Message)
	secs, err := strconv.Atoi(retryAfter)
	require.NoError(t, err, "Retry-After is whole seconds: %q", retryAfter)
	require.True(t, secs >= 1 && secs <= maxWait, "Retry-After %d within 1..%d", secs, maxWait)
}

// A key over its request rate gets 429 rate_limited with Retry-After, on every route, while
// another key is unaffected; a key's own rate replaces the default; refusals are counted.
func TestKeyRateLimit(t *testing.T) {
	t.Parallel()
	f := setupAdmission(t, "sqlite", courier.Rate{PerSecond: tinyRate, Burst: 2})
	flood := newKey(t, f.st, "flood", apikey.ScopeProducer, nil)
	other := newKey(t, f.st, "other", apikey.ScopeProducer, nil)
	own := newKey(t, f.st, "own", apikey.ScopeProducer, &courier.Rate{PerSecond: tinyRate, Burst: 4})
	free := newKey(t, f.st, "free", apikey.ScopeProducer, &courier.Rate{})

	for i := 0; i < 2; i++ {
		st, _, eb := f.send(t, "GET", "/v1/outbox", flood, "")
		require.Equal(t, http.StatusOK, st, "request %d is within the burst: %+v", i, eb)
	}
	st, ra, eb := f.send(t, "GET", "/v1/outbox", flood, "")
	requireRateLimited(t, st, ra, eb, courier.CodeRateLimited, 1000)
	require.GreaterOrEqual(t, mustAtoi(t, ra), 990, "one token per 1000 s: the next is ~1000 s away")
	require.Equal(t, "api_key", eb.Error.Details["limit"])
	require.Equal(t, keyID(flood), eb.Error.Details["name"])
	// Any route: the key's budget is spent, whatever it asks for next.
	st, ra, eb = f.send(t, "POST", "/v1/tasks", flood, `{"task_id":"t","task_version":1}`)
	requireRateLimited(t, st, ra, eb, courier.CodeRateLimited, 1000)
	_, err := f.st.GetLatestTask(t.Context(), "t")
	require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "a refused request writes nothing")

	st, _, eb = f.send(t, "GET", "/v1/outbox", other, "")
	require.Equal(t, http.StatusOK, st, "another key has its own budget: %+v", eb)

	for i := 0; i < 4; i++ {
		st, _, eb := f.send(t, "GET", "/v1/outbox", own, "")
		require.Equal(t, http.StatusOK, st, "the key's own burst of 4 replaces the default 2: request %d: %+v", i, eb)
	}
	st, ra, eb = f.send(t, "GET", "/v1/outbox", own, "")
	requireRateLimited(t, st, ra, eb, courier.CodeRateLimited, 1000)

	for i := 0; i < 20; i++ {
		st, _, eb := f.send(t, "GET", "/v1/outbox", free, "")
		require.Equal(t, http.StatusOK, st, "a key with its own zero rate is unlimited: %+v", eb)
	}

	require.EqualValues(t, 2, f.refusedMetric(t, metrics.RefusedKeyRate, keyID(flood)))
	require.EqualValues(t, 1, f.refusedMetric(t, metrics.RefusedKeyRate, keyID(own)))
	require.Zero(t, f.refusedMetric(t, metrics.RefusedKeyRate, keyID(other)))

	// A rate changed in the store applies from the key's next request.
	require.NoError(t, f.st.SetAPIKeyRate(t.Context(), keyID(flood), &courier.Rate{}))
	st, _, eb = f.send(t, "GET", "/v1/outbox", flood, "")
	require.Equal(t, http.StatusOK, st, "%+v", eb)
}

// Without a configured key rate (the library default) nothing is throttled.
func TestKeyRateUnlimitedByDefault(t *testing.T) {
	t.Parallel()
	f := setupAdmission(t, "sqlite", courier.Rate{})
	tok := newKey(t, f.st, "p", apikey.ScopeProducer, nil)
	for i := 0; i < 30; i++ {
		st, _, eb := f.send(t, "GET", "/v1/outbox", tok, "")
		require.Equal(t, http.StatusOK, st, "%+v", eb)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// A queue's insert rate and backlog budget answer 429 with their codes and Retry-After, write
// nothing, leave other queues alone and are counted; on both databases.
func TestQueueInsertRateAndBacklog(t *testing.T) {
	t.Parallel()
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			f := setupAdmission(t, d, courier.Rate{})
			prod := newKey(t, f.st, "p", apikey.ScopeProducer, nil)

			var q api.Queue
			st, _, eb := f.send(t, "PUT", "/v1/queues/limited", f.admin, `{"insert_rate_per_second":0.001,"insert_burst":2}`)
			require.Equal(t, http.StatusCreated, st, "%+v", eb)
			st, _, eb = f.send(t, "PUT", "/v1/queues/small", f.admin, `{"max_pending":2}`)
			require.Equal(t, http.StatusCreated, st, "%+v", eb)
			resp, _ := f.do(t, "GET", "/v1/queues/small", f.admin, "", nil)
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&q))
			require.Equal(t, 2, q.MaxPending)

			insert := func(queue, id string) (int, string, api.ErrorBody) {
				return f.send(t, "POST", "/v1/tasks", prod, `{"task_id":"`+id+`","task_version":1,"queue":"`+queue+`"}`)
			}
			// Insert rate: the burst of 2, then 429 rate_limited.
			for _, id := range []string{"r-1", "r-2"} {
				st, _, eb := insert("limited", id)
				require.Equal(t, http.StatusCreated, st, "%+v", eb)
			}
			st, ra, eb := insert("limited", "r-3")
			requireRateLimited(t, st, ra, eb, courier.CodeRateLimited, 1000)
			require.Equal(t, "queue", eb.Error.Details["limit"])
			require.Equal(t, "limited", eb.Error.Details["name"])
			_, err := f.st.GetLatestTask(t.Context(), "r-3")
			require.Equal(t, courier.CodeNotFound, courier.ErrorCode(err), "nothing written")
			st, _, eb = insert("default", "d-1")
			require.Equal(t, http.StatusCreated, st, "another queue is not held back: %+v", eb)

			// Backlog budget: two pending fill it; the third is 429 backlog_full.
			for _, id := range []string{"b-1", "b-2"} {
				st, _, eb := insert("small", id)
				require.Equal(t, http.StatusCreated, st, "%+v", eb)
			}
			st, ra, eb = insert("small", "b-3")
			requireRateLimited(t, st, ra, eb, courier.CodeBacklogFull, 5)
			require.Equal(t, strconv.Itoa(int(store.BacklogRetryAfter/time.Second)), ra)
			require.Equal(t, "small", eb.Error.Details["queue"])
			require.EqualValues(t, 2, eb.Error.Details["max_pending"])
			st, _, _ = f.send(t, "GET", "/v1/tasks/b-3", prod, "")
			require.Equal(t, http.StatusNotFound, st, "a refused insert writes nothing")
			// The same request again is still accepted as it was (idempotent repeats pass).
			st, _, eb = insert("small", "b-1")
			require.Equal(t, http.StatusOK, st, "%+v", eb)

			require.EqualValues(t, 1, f.refusedMetric(t, metrics.RefusedQueueRate, "limited"))
			require.EqualValues(t, 1, f.refusedMetric(t, metrics.RefusedBacklog, "small"))

			// Raising the budget through the API applies to the next insert.
			st, _, eb = f.send(t, "PUT", "/v1/queues/small", f.admin, `{"max_pending":3}`)
			require.Equal(t, http.StatusOK, st, "%+v", eb)
			st, _, eb = insert("small", "b-3")
			require.Equal(t, http.StatusCreated, st, "%+v", eb)
		})
	}
}

// A business type's insert rate limits the timers created for it, before they reach the timer
// service, and leaves other types alone.
func TestBizTypeInsertRate(t *testing.T) {
	t.Parallel()
	f := setupAdmission(t, "sqlite", courier.Rate{})
	prod := newKey(t, f.st, "p", apikey.ScopeProducer, nil)
	var bt api.BizType
	st, _, eb := f.send(t, "PUT", "/v1/biz-types/orders.close", f.admin,
		`{"delivery":"mq","topic":"orders.close","insert_rate_per_second":0.001,"insert_burst":1}`)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	resp, _ := f.do(t, "GET", "/v1/biz-types/orders.close", f.admin, "", nil)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&bt))
	require.Equal(t, 0.001, bt.InsertRate)
	require.Equal(t, 1, bt.InsertBurst)
	st, _, eb = f.send(t, "PUT", "/v1/biz-types/coupons", f.admin, `{"delivery":"mq","topic":"coupons"}`)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)

	timer := func(bizType, id string) (int, string, api.ErrorBody) {
		return f.send(t, "POST", "/v1/timers", prod, `{"biz_type":"`+bizType+`","biz_id":"`+id+`","delay":"1h"}`)
	}
	st, _, eb = timer("orders.close", "o-1")
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	st, ra, eb := timer("orders.close", "o-2")
	requireRateLimited(t, st, ra, eb, courier.CodeRateLimited, 1000)
	require.Equal(t, "biz_type", eb.Error.Details["limit"])
	require.Equal(t, "orders.close", eb.Error.Details["name"])
	require.Equal(t, 1, f.timers.count(), "the refused timer never reached the timer service")
	for i := 0; i < 5; i++ {
		st, _, eb = timer("coupons", "c-"+strconv.Itoa(i))
		require.Equal(t, http.StatusCreated, st, "an unlimited type is not held back: %+v", eb)
	}
	require.EqualValues(t, 1, f.refusedMetric(t, metrics.RefusedBizTypeRate, "orders.close"))

	// Lifting the limit through the API applies at once on this gateway.
	st, _, eb = f.send(t, "PUT", "/v1/biz-types/orders.close", f.admin, `{"delivery":"mq","topic":"orders.close"}`)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	st, _, eb = timer("orders.close", "o-2")
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
}

// Admission settings are validated like every other field.
func TestAdmissionSettingsValidated(t *testing.T) {
	t.Parallel()
	f := setupAdmission(t, "sqlite", courier.Rate{})
	for _, c := range []struct{ path, body, field string }{
		{"/v1/queues/q", `{"insert_rate_per_second":-1}`, "insert_rate_per_second"},
		{"/v1/queues/q", `{"insert_rate_per_second":1e30}`, "insert_rate_per_second"},
		{"/v1/queues/q", `{"insert_burst":5}`, "insert_burst"},
		{"/v1/queues/q", `{"insert_rate_per_second":1,"insert_burst":-1}`, "insert_burst"},
		{"/v1/queues/q", `{"max_pending":-1}`, "max_pending"},
		{"/v1/biz-types/b", `{"delivery":"mq","topic":"t","insert_rate_per_second":-2}`, "insert_rate_per_second"},
		{"/v1/biz-types/b", `{"delivery":"mq","topic":"t","insert_burst":3}`, "insert_burst"},
	} {
		st, _, eb := f.send(t, "PUT", c.path, f.admin, c.body)
		require.Equal(t, http.StatusUnprocessableEntity, st, "%s %s: %+v", c.path, c.body, eb)
		require.Equal(t, courier.CodeValidation, eb.Error.Code)
		require.Equal(t, c.field, eb.Error.Details["field"], c.body)
	}
	st, _, _ := f.send(t, "GET", "/v1/queues/q", f.admin, "")
	require.Equal(t, http.StatusNotFound, st, "nothing stored")
}
