package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/store"
)

type fixture struct {
	url                     string
	st                      *store.Store
	prodDB                  *store.Store // a producer's own database, source "accounts"
	admin, producer, worker string
	readyErr                error
}

func setup(t *testing.T) *fixture {
	t.Helper()
	st, _ := testenv.Store(t, "sqlite")
	prod, _ := testenv.Store(t, "sqlite")
	f := &fixture{st: st, prodDB: prod}
	ctx := t.Context()
	mk := func(s apikey.Scope) string {
		_, tok, err := st.CreateAPIKey(ctx, string(s), []apikey.Scope{s})
		require.NoError(t, err)
		return tok
	}
	f.admin, f.producer, f.worker = mk(apikey.ScopeAdmin), mk(apikey.ScopeProducer), mk(apikey.ScopeWorker)
	reg := prometheus.NewRegistry()
	h := gateway.New(gateway.Config{MaxBodyBytes: 4096}, gateway.Deps{
		Keys: st, Outbox: st, Gatherer: reg,
		Sources:  map[string]gateway.OutboxStore{"accounts": prod},
		BizTypes: st,
		Checks: []gateway.Check{
			{Name: "database", Probe: st.Ping},
			{Name: "mq", Probe: func(context.Context) error { return f.readyErr }},
		},
	})
	srv := newServer(t, h)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *fixture) do(t *testing.T, method, path, token, contentType string, body io.Reader) (*http.Response, api.ErrorBody) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, body)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var eb api.ErrorBody
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(raw, &eb), "error bodies are JSON: %s", raw)
		require.NotEmpty(t, eb.Error.Code)
		require.NotEmpty(t, eb.Error.Message)
	}
	resp.Body = io.NopCloser(strings.NewReader(string(raw)))
	return resp, eb
}

func (f *fixture) count(t *testing.T) int {
	recs, _, err := f.st.ListOutbox(t.Context(), courier.OutboxFilter{Limit: 1000})
	require.NoError(t, err)
	return len(recs)
}

func TestAuthMatrix(t *testing.T) {
	f := setup(t)
	rec, err := f.st.EnqueueOutbox(t.Context(), outbox.Message{Topic: "a.b", Payload: []byte("{}")})
	require.NoError(t, err)
	_, err = f.st.MarkOutboxDead(t.Context(), rec.ID, "x")
	require.NoError(t, err)

	type route struct {
		method, path, body string
		scope              apikey.Scope
	}
	routes := []route{
		{"GET", "/v1/outbox", "", apikey.ScopeProducer},
		{"GET", fmt.Sprintf("/v1/outbox/%d", rec.ID), "", apikey.ScopeProducer},
		{"POST", "/v1/outbox", `{"topic":"a.b","payload":{}}`, apikey.ScopeProducer},
		{"POST", fmt.Sprintf("/v1/outbox/%d/redrive", rec.ID), "", apikey.ScopeAdmin},
	}
	tokens := map[string]string{"admin": f.admin, "producer": f.producer, "worker": f.worker}
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			resp, eb := f.do(t, r.method, r.path, "", "", strings.NewReader(r.body))
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key")
			require.Equal(t, courier.CodeUnauthenticated, eb.Error.Code)

			resp, eb = f.do(t, r.method, r.path, "ck_nothing_real", "", strings.NewReader(r.body))
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "bad key")
			require.Equal(t, courier.CodeUnauthenticated, eb.Error.Code)

			for name, tok := range tokens {
				allowed := name == "admin" || apikey.Scope(name) == r.scope
				resp, eb = f.do(t, r.method, r.path, tok, "", strings.NewReader(r.body))
				if allowed {
					require.Less(t, resp.StatusCode, 400, "%s may call it: %+v", name, eb)
				} else {
					require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s must be refused", name)
					require.Equal(t, courier.CodePermissionDenied, eb.Error.Code)
				}
			}
		})
	}
}

func TestBadJSONWritesNothing(t *testing.T) {
	f := setup(t)
	cases := []struct {
		name, body string
		status     int
		code       courier.Code
	}{
		{"syntax", `{"topic": "a.b", "payload": `, 400, courier.CodeInvalid},
		{"not json", `topic=a`, 400, courier.CodeInvalid},
		{"empty", ``, 400, courier.CodeInvalid},
		{"unknown field", `{"topic":"a.b","payload":1,"extra":true}`, 400, courier.CodeInvalid},
		{"trailing", `{"topic":"a.b","payload":1} {}`, 400, courier.CodeInvalid},
		{"wrong type", `{"topic":7,"payload":1}`, 422, courier.CodeValidation},
		{"no topic", `{"payload":1}`, 400, courier.CodeInvalid},
		{"wildcard topic", `{"topic":"a.*","payload":1}`, 400, courier.CodeInvalid},
		{"JetStream purge subject", `{"topic":"$JS.API.STREAM.PURGE.ORDERS","payload":1}`, 400, courier.CodeInvalid},
		{"JetStream delete subject", `{"topic":"$JS.API.STREAM.DELETE.ORDERS","payload":1}`, 400, courier.CodeInvalid},
		{"reply subject", `{"topic":"_INBOX.x","payload":1}`, 400, courier.CodeInvalid},
		{"rollup header", `{"topic":"a.b","payload":1,"headers":{"Nats-Rollup":"all"}}`, 400, courier.CodeInvalid},
		{"msg id header", `{"topic":"a.b","payload":1,"headers":{"nats-msg-id":"1"}}`, 400, courier.CodeInvalid},
		{"no payload", `{"topic":"a.b"}`, 422, courier.CodeValidation},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, eb := f.do(t, "POST", "/v1/outbox", f.producer, "application/json", strings.NewReader(c.body))
			require.Equal(t, c.status, resp.StatusCode)
			require.Equal(t, c.code, eb.Error.Code)
		})
	}
	resp, eb := f.do(t, "POST", "/v1/outbox", f.producer, "text/plain", strings.NewReader(`{"topic":"a","payload":1}`))
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	require.Equal(t, courier.CodeUnsupportedMedia, eb.Error.Code)
	require.Zero(t, f.count(t), "a rejected request writes nothing")
}

func TestOversizedBody(t *testing.T) {
	f := setup(t)
	big := `{"topic":"a.b","payload":"` + strings.Repeat("x", 5000) + `"}`
	// With a Content-Length.
	resp, eb := f.do(t, "POST", "/v1/outbox", f.producer, "application/json", strings.NewReader(big))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, courier.CodeTooLarge, eb.Error.Code)
	// Chunked, without a Content-Length.
	resp, eb = f.do(t, "POST", "/v1/outbox", f.producer, "application/json", io.MultiReader(strings.NewReader(big)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, courier.CodeTooLarge, eb.Error.Code)
	require.Zero(t, f.count(t))
}

func TestPublishGetListRedrive(t *testing.T) {
	f := setup(t)
	resp, _ := f.do(t, "POST", "/v1/outbox", f.producer, "application/json",
		strings.NewReader(`{"topic":"orders.created","key":"o-1","payload":{"order":1},"headers":{"trace":"t1"}}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var rec api.OutboxRecord
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rec))
	require.Equal(t, "orders.created", rec.Topic)
	require.JSONEq(t, `{"order":1}`, string(rec.Payload))
	require.EqualValues(t, "pending", rec.Status)
	require.Empty(t, rec.WorkflowID, "no workflow has taken the record yet")

	resp, _ = f.do(t, "GET", fmt.Sprintf("/v1/outbox/%d", rec.ID), f.producer, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	resp, eb := f.do(t, "GET", "/v1/outbox/999999", f.producer, "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
	resp, eb = f.do(t, "POST", "/v1/outbox/999999/redrive", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, eb = f.do(t, "GET", "/v1/outbox/-3", f.producer, "", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, courier.CodeInvalid, eb.Error.Code)

	resp, eb = f.do(t, "GET", "/v1/outbox?status=lost", f.producer, "", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, eb = f.do(t, "GET", "/v1/outbox?limit=0", f.producer, "", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	resp, eb = f.do(t, "POST", fmt.Sprintf("/v1/outbox/%d/redrive", rec.ID), f.admin, "", nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "a pending record cannot be redriven")
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	require.Equal(t, "pending", eb.Error.Details["status"])

	// Once the relay has claimed it, its own delivery takes it.
	_, err := f.st.ClaimOutbox(t.Context(), 10, time.Minute)
	require.NoError(t, err)
	resp, _ = f.do(t, "GET", fmt.Sprintf("/v1/outbox/%d", rec.ID), f.producer, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rec))
	require.Equal(t, fmt.Sprintf("outbox/%d", rec.ID), rec.WorkflowID)

	_, err = f.st.MarkOutboxDead(t.Context(), rec.ID, "no stream")
	require.NoError(t, err)
	resp, _ = f.do(t, "GET", "/v1/outbox?status=dead", f.producer, "", nil)
	var page api.OutboxPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.Items, 1)
	require.Equal(t, "no stream", page.Items[0].LastError)
	resp, _ = f.do(t, "POST", fmt.Sprintf("/v1/outbox/%d/redrive", rec.ID), f.admin, "", nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	got, err := f.st.GetOutbox(t.Context(), rec.ID)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxPending, got.Status)
}

func TestHealthReadinessMetricsOpenAPI(t *testing.T) {
	f := setup(t)
	resp, _ := f.do(t, "GET", "/healthz", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = f.do(t, "GET", "/readyz", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	f.readyErr = errors.New("nats: not connected to nats://10.1.2.3:4222 as user ops")
	req, _ := http.NewRequest("GET", f.url+"/readyz", nil)
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var ready struct {
		Ready  bool              `json:"ready"`
		Checks map[string]string `json:"checks"`
	}
	require.NoError(t, json.NewDecoder(r.Body).Decode(&ready))
	r.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, r.StatusCode)
	require.False(t, ready.Ready)
	require.Equal(t, map[string]string{"database": "ok", "mq": "down"}, ready.Checks,
		"readiness names the dependency that is down; the error itself (addresses, users) stays in the log")

	resp, _ = f.do(t, "GET", "/metrics", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = f.do(t, "GET", "/openapi.yaml", "", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), "/v1/outbox/{id}/redrive")

	resp, eb := f.do(t, "GET", "/v1/nothing-here", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
}

// Records in a producer's own database are read and redriven with ?source=; ids of different
// databases never mix.
func TestProducerSources(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	own, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "own.topic", Payload: []byte("1")})
	require.NoError(t, err)
	theirs, err := f.prodDB.EnqueueOutbox(ctx, outbox.Message{Topic: "user.registered", Payload: []byte("2")})
	require.NoError(t, err)
	require.Equal(t, own.ID, theirs.ID, "both databases start at id 1")
	_, err = f.prodDB.ClaimOutbox(ctx, 10, time.Minute)
	require.NoError(t, err)

	var rec api.OutboxRecord
	resp, _ := f.do(t, "GET", fmt.Sprintf("/v1/outbox/%d?source=accounts", theirs.ID), f.producer, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rec))
	require.Equal(t, "user.registered", rec.Topic)
	require.Equal(t, "accounts", rec.Source)
	require.Equal(t, fmt.Sprintf("outbox/accounts/%d", theirs.ID), rec.WorkflowID)

	resp, _ = f.do(t, "GET", fmt.Sprintf("/v1/outbox/%d", own.ID), f.producer, "", nil)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rec))
	require.Equal(t, "own.topic", rec.Topic)
	require.Equal(t, "default", rec.Source)

	resp, eb := f.do(t, "GET", "/v1/outbox?source=nope", f.producer, "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)

	_, err = f.prodDB.MarkOutboxDead(ctx, theirs.ID, "no stream")
	require.NoError(t, err)
	resp, _ = f.do(t, "GET", "/v1/outbox?source=accounts&status=dead", f.producer, "", nil)
	var page api.OutboxPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.Items, 1)
	resp, _ = f.do(t, "POST", fmt.Sprintf("/v1/outbox/%d/redrive?source=accounts", theirs.ID), f.admin, "", nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	got, err := f.prodDB.GetOutbox(ctx, theirs.ID)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxPending, got.Status)
	mine, err := f.st.GetOutbox(ctx, own.ID)
	require.NoError(t, err)
	require.Equal(t, courier.OutboxPending, mine.Status, "courier's own record with the same id is untouched")
}

func TestBizTypesAPI(t *testing.T) {
	f := setup(t)
	body := `{"delivery":"http","callback_url":"https://orders.example/cb","request_timeout":"5s","retry":{"max_attempts":4},"rate_limit_per_second":5}`
	resp, eb := f.do(t, "PUT", "/v1/biz-types/order.close", f.producer, "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "admin only")
	require.Equal(t, courier.CodePermissionDenied, eb.Error.Code)

	resp, _ = f.do(t, "PUT", "/v1/biz-types/order.close", f.admin, "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var bt api.BizType
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&bt))
	require.True(t, strings.HasPrefix(bt.GeneratedSecret, "whsec_"), "a secret is generated and shown once")
	require.Equal(t, 1, bt.SecretsCount)
	require.Equal(t, api.Duration(5*time.Second), bt.RequestTimeout)
	require.Equal(t, 4, bt.Retry.MaxAttempts)
	require.Equal(t, api.PositiveDuration(time.Second), bt.Retry.InitialInterval, "defaults fill the rest")
	require.Equal(t, "courier-biz-order.close", bt.TaskQueue)

	resp, _ = f.do(t, "GET", "/v1/biz-types/order.close", f.admin, "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	raw, _ := io.ReadAll(resp.Body)
	require.NotContains(t, string(raw), bt.GeneratedSecret, "secrets are never shown again")

	resp, _ = f.do(t, "PUT", "/v1/biz-types/order.close", f.admin, "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusOK, resp.StatusCode, "a second PUT replaces")
	var again api.BizType
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&again))
	require.Empty(t, again.GeneratedSecret, "replacing keeps the secret")
	kept, err := f.st.GetBizType(t.Context(), "order.close")
	require.NoError(t, err)
	require.Equal(t, []string{bt.GeneratedSecret}, kept.Secrets)

	resp, _ = f.do(t, "PUT", "/v1/biz-types/order.close", f.admin, "application/json",
		strings.NewReader(`{"delivery":"mq","topic":"orders.close"}`))
	require.Equal(t, http.StatusOK, resp.StatusCode)

	for name, c := range map[string]struct {
		path, body string
		status     int
	}{
		"bad delivery":  {"/v1/biz-types/x", `{"delivery":"fax"}`, 422},
		"bad duration":  {"/v1/biz-types/x", `{"delivery":"mq","topic":"a","request_timeout":"soon"}`, 422},
		"bad url":       {"/v1/biz-types/x", `{"delivery":"http","callback_url":"ftp://x"}`, 422},
		"short secret":  {"/v1/biz-types/x", `{"delivery":"http","callback_url":"https://example.com/cb","secrets":["whsec_short"]}`, 422},
		"bad name":      {"/v1/biz-types/Bad%20Name", `{"delivery":"mq","topic":"a"}`, 400},
		"too fast":      {"/v1/biz-types/x", `{"delivery":"mq","topic":"a","rate_limit_per_second":-1}`, 422},
		"unknown field": {"/v1/biz-types/x", `{"delivery":"mq","topic":"a","colour":"red"}`, 400},
	} {
		resp, _ := f.do(t, "PUT", c.path, f.admin, "application/json", strings.NewReader(c.body))
		require.Equal(t, c.status, resp.StatusCode, name)
	}
	resp, _ = f.do(t, "GET", "/v1/biz-types", f.admin, "", nil)
	var list struct{ Items []api.BizType }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Items, 1, "rejected requests wrote nothing")

	resp, _ = f.do(t, "DELETE", "/v1/biz-types/order.close", f.admin, "", nil)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp, eb = f.do(t, "GET", "/v1/biz-types/order.close", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
}

// Lists are bounded pages: without include_payload no payload leaves the database (only its
// size), with it a page stops at the payload budget, pages follow an opaque token that belongs
// to its query, and a garbage token is a quick 400.
func TestOutboxListPages(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	big := make([]byte, 500<<10)
	for i := range big {
		big[i] = 'x'
	}
	const n = 40
	for i := 0; i < n; i++ {
		_, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "big.records", Payload: big})
		require.NoError(t, err)
	}
	var page api.OutboxPage
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, _ := f.do(t, "GET", "/v1/outbox?limit=1000", f.producer, "", nil)
	runtime.ReadMemStats(&after)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.Items, n)
	require.Empty(t, page.NextPageToken, "the last page has no token")
	for _, it := range page.Items {
		require.Nil(t, it.Payload, "payloads are left out unless asked for")
		require.Equal(t, len(big), it.PayloadBytes)
	}
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(n*len(big)/4),
		"listing %d large records allocates far less than their payloads", n)

	seen := map[int64]bool{}
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, n, "paging ends")
		resp, eb := f.do(t, "GET", "/v1/outbox?include_payload=true&limit=1000&page_token="+token, f.producer, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%+v", eb)
		var p api.OutboxPage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		bytes := 0
		for _, it := range p.Items {
			require.Equal(t, "base64", it.PayloadEncoding, "500 KB of 'x' are not JSON")
			var got []byte
			require.NoError(t, json.Unmarshal(it.Payload, &got))
			require.True(t, string(big) == string(got), "record %d's payload comes back whole", it.ID)
			require.False(t, seen[it.ID], "record %d on two pages", it.ID)
			seen[it.ID] = true
			bytes += len(got)
		}
		require.LessOrEqual(t, bytes, store.DefaultPayloadBudget, "a page's payloads stay within the budget")
		if p.NextPageToken == "" {
			break
		}
		token = p.NextPageToken
	}
	require.Len(t, seen, n, "paging reaches every record once")

	for name, q := range map[string]string{
		"garbage":            "page_token=%%%garbage",
		"not base64 json":    "page_token=bm90IGpzb24",
		"another query":      "status=dead&page_token=" + token,
		"bad include":        "include_payload=maybe",
		"limit out of range": "limit=1001",
		"bad topic":          "topic=%24JS.API.x",
	} {
		start := time.Now()
		resp, eb := f.do(t, "GET", "/v1/outbox?"+q, f.producer, "", nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, name)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code, name)
		require.Less(t, time.Since(start), 5*time.Second, "%s is refused at once", name)
	}
}

// blockingTimers stands in for a Temporal that never answers: every call waits for the
// request's context.
type blockingTimers struct{ gateway.TimerService }

func (blockingTimers) Get(ctx context.Context, _, _ string) (api.Timer, error) {
	<-ctx.Done()
	return api.Timer{}, ctx.Err()
}

// Nothing waits forever: work behind a request is bounded by the request timeout and answered
// 503 unavailable with the JSON error shape.
func TestRequestTimeoutIs503(t *testing.T) {
	st, _ := testenv.Store(t, "sqlite")
	_, tok, err := st.CreateAPIKey(t.Context(), "p", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(t, err)
	srv := newServer(t, gateway.New(gateway.Config{RequestTimeout: 200 * time.Millisecond},
		gateway.Deps{Keys: st, Outbox: st, Timers: blockingTimers{}}))
	t.Cleanup(srv.Close)
	f := &fixture{url: srv.URL}
	start := time.Now()
	resp, eb := f.do(t, "GET", "/v1/timers/orders/o-1", tok, "", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, courier.CodeUnavailable, eb.Error.Code)
	require.Less(t, time.Since(start), 10*time.Second)
}

// A payload comes back as it was posted: JSON as the JSON value itself, not base64; bytes that
// are not JSON, or that a producer wrote with a non-JSON Content-Type, as a base64 string, each
// saying which in payload_encoding.
func TestPayloadsAsPosted(t *testing.T) {
	f := setup(t)
	ctx := t.Context()
	resp, _ := f.do(t, "POST", "/v1/outbox", f.producer, "application/json",
		strings.NewReader(`{"topic":"orders.created","payload":{"order":1,"lines":["a","b"]}}`))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var posted api.OutboxRecord
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&posted))

	binary, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "files.stored", Payload: []byte{0xff, 0x00, 0x01}})
	require.NoError(t, err)
	typed, err := f.st.EnqueueOutbox(ctx, outbox.Message{Topic: "files.stored", Payload: []byte(`{"a":1}`),
		Headers: map[string]string{"Content-Type": "application/octet-stream"}})
	require.NoError(t, err)

	for _, c := range []struct {
		id       int64
		encoding string
		payload  string
	}{
		{posted.ID, "json", `{"order":1,"lines":["a","b"]}`},
		{binary.ID, "base64", `"/wAB"`},
		{typed.ID, "base64", `"eyJhIjoxfQ=="`},
	} {
		resp, _ := f.do(t, "GET", fmt.Sprintf("/v1/outbox/%d", c.id), f.producer, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var raw map[string]json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
		require.JSONEq(t, c.payload, string(raw["payload"]), "record %d", c.id)
		require.JSONEq(t, `"`+c.encoding+`"`, string(raw["payload_encoding"]), "record %d", c.id)
	}
	resp, _ = f.do(t, "GET", "/v1/outbox?include_payload=true", f.producer, "", nil)
	var page api.OutboxPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	require.Len(t, page.Items, 3)
	require.JSONEq(t, `{"order":1,"lines":["a","b"]}`, string(page.Items[0].Payload), "lists show payloads the same way")
}

// POST /v1/outbox with an Idempotency-Key is safe to retry: the repeat answers the record the
// first request wrote (200, existing) and writes nothing; another body under the same key is
// 409; a malformed key is 422. Without a key every request writes a record.
func TestPublishIsIdempotentWithAKey(t *testing.T) {
	f := setup(t)
	publish := func(key, body string) (*http.Response, api.OutboxRecord, api.ErrorBody) {
		t.Helper()
		req, err := http.NewRequest("POST", f.url+"/v1/outbox", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+f.producer)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var rec api.OutboxRecord
		var eb api.ErrorBody
		if resp.StatusCode < 400 {
			require.NoError(t, json.Unmarshal(raw, &rec))
		} else {
			require.NoError(t, json.Unmarshal(raw, &eb))
		}
		return resp, rec, eb
	}
	body := `{"topic":"orders.created","key":"o-1","payload":{"order":1}}`
	resp, first, _ := publish("7a8c0e4e-order-1", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "created", first.Outcome)
	resp, again, _ := publish("7a8c0e4e-order-1", `{"topic": "orders.created", "key": "o-1", "payload": {"order": 1}}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the same request, spaced differently")
	require.Equal(t, "existing", again.Outcome)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, 1, f.count(t), "one record")

	resp, _, eb := publish("7a8c0e4e-order-1", `{"topic":"orders.created","key":"o-1","payload":{"order":2}}`)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	for _, bad := range []string{strings.Repeat("k", 256), "has space", "ключ"} {
		resp, _, eb = publish(bad, body)
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, bad)
		require.Equal(t, courier.CodeValidation, eb.Error.Code)
	}
	require.Equal(t, 1, f.count(t), "nothing refused wrote a record")

	resp, _, _ = publish("", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp, _, _ = publish("", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, 3, f.count(t), "without a key every request writes")
}
