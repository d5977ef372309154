package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
)

// The gateway's whole surface, taken from its router: every route gets hostile paths, queries
// and bodies (TestEveryRouteRefusesHostileInput) and every key situation (TestAuthEveryRoute).
// A route added tomorrow is covered the day it is added; one the tables below do not know fails
// both tests until it is classified.

// routeScope is who may call each route ("" = anyone).
var routeScope = map[string]apikey.Scope{
	"GET /healthz":      "",
	"GET /readyz":       "",
	"GET /metrics":      "",
	"GET /openapi.yaml": "",

	"POST /v1/outbox":             apikey.ScopeProducer,
	"GET /v1/outbox":              apikey.ScopeProducer,
	"GET /v1/outbox/:id":          apikey.ScopeProducer,
	"POST /v1/outbox/:id/redrive": apikey.ScopeAdmin,
	"POST /v1/outbox/redrive":     apikey.ScopeAdmin,
	"GET /v1/outbox/blocked-keys": apikey.ScopeProducer,
	"POST /v1/outbox/:id/skip":    apikey.ScopeAdmin,

	"GET /v1/biz-types":          apikey.ScopeAdmin,
	"GET /v1/biz-types/:name":    apikey.ScopeAdmin,
	"PUT /v1/biz-types/:name":    apikey.ScopeAdmin,
	"DELETE /v1/biz-types/:name": apikey.ScopeAdmin,

	"POST /v1/timers":                             apikey.ScopeProducer,
	"GET /v1/timers":                              apikey.ScopeProducer,
	"GET /v1/timers/:biz_type/:biz_id":            apikey.ScopeProducer,
	"PATCH /v1/timers/:biz_type/:biz_id":          apikey.ScopeProducer,
	"DELETE /v1/timers/:biz_type/:biz_id":         apikey.ScopeProducer,
	"POST /v1/timers/batch":                       apikey.ScopeProducer,
	"POST /v1/timers/redeliver":                   apikey.ScopeAdmin,
	"POST /v1/timers/:biz_type/:biz_id/redeliver": apikey.ScopeAdmin,

	"POST /v1/tasks":                                      apikey.ScopeProducer,
	"GET /v1/tasks":                                       apikey.ScopeProducer,
	"GET /v1/tasks/:task_id":                              apikey.ScopeProducer,
	"GET /v1/tasks/:task_id/versions/:version":            apikey.ScopeProducer,
	"DELETE /v1/tasks/:task_id/versions/:version":         apikey.ScopeProducer,
	"POST /v1/tasks/:task_id/versions/:version/result":    apikey.ScopeWorker,
	"POST /v1/tasks/results":                              apikey.ScopeWorker,
	"POST /v1/tasks/:task_id/versions/:version/heartbeat": apikey.ScopeWorker,
	"POST /v1/tasks/:task_id/versions/:version/retry":     apikey.ScopeProducer,
	"POST /v1/tasks/bulk/cancel":                          apikey.ScopeAdmin,
	"POST /v1/tasks/bulk/retry":                           apikey.ScopeAdmin,
	"GET /v1/queues":                                      apikey.ScopeAdmin,
	"GET /v1/queues/:name":                                apikey.ScopeAdmin,
	"PUT /v1/queues/:name":                                apikey.ScopeAdmin,
	"DELETE /v1/queues/:name":                             apikey.ScopeAdmin,

	"GET /v1/pauses":                apikey.ScopeAdmin,
	"POST /v1/pauses":               apikey.ScopeAdmin,
	"DELETE /v1/pauses/:kind/:name": apikey.ScopeAdmin,

	"GET /v1/schedules":              apikey.ScopeProducer,
	"PUT /v1/schedules/:id":          apikey.ScopeProducer,
	"GET /v1/schedules/:id":          apikey.ScopeProducer,
	"DELETE /v1/schedules/:id":       apikey.ScopeProducer,
	"POST /v1/schedules/:id/pause":   apikey.ScopeProducer,
	"POST /v1/schedules/:id/unpause": apikey.ScopeProducer,
	"POST /v1/schedules/:id/trigger": apikey.ScopeProducer,
}

// validBodies are well-formed bodies of each route that takes one; the hostile test mutates
// them one field at a time.
var validBodies = map[string][]string{
	"POST /v1/outbox": {`{"topic":"orders.created","key":"k-1","headers":{"X-Trace":"abc"},"payload":{"n":1}}`},
	"POST /v1/outbox/redrive": {`{"topic":"orders.>","dead_after":"2020-01-01T00:00:00Z","dead_before":"2099-01-01T00:00:00Z","max":10}`,
		`{"topic":"orders.>","dead_after":"2020-01-01T00:00:00Z","max":10}`},
	"PUT /v1/biz-types/:name": {`{"delivery":"http","callback_url":"https://hooks.example.com/courier","request_timeout":"5s",` +
		`"retry":{"initial_interval":"1s","backoff":2,"max_interval":"1m","max_attempts":3},"rate_limit_per_second":10}`,
		`{"delivery":"mq","topic":"orders.due"}`},
	"POST /v1/timers": {`{"biz_type":"orders","biz_id":"h-1","fire_at":"2099-01-01T00:00:00Z","payload":{"n":1}}`,
		`{"biz_type":"orders","biz_id":"h-2","delay":"1000h","payload":{"n":1}}`},
	"PATCH /v1/timers/:biz_type/:biz_id": {`{"fire_at":"2099-06-01T00:00:00Z"}`, `{"delay":"2000h"}`},
	"POST /v1/timers/batch": {`{"timers":[{"biz_type":"orders","biz_id":"hb-1","fire_at":"2099-01-01T00:00:00Z","payload":{"n":1}},` +
		`{"biz_type":"orders","biz_id":"hb-2","delay":"1000h"}]}`},
	"POST /v1/timers/redeliver": {`{"biz_type":"orders","failed_after":"2020-01-01T00:00:00Z","failed_before":"2099-01-01T00:00:00Z","max":10}`},
	"POST /v1/tasks": {`{"task_id":"h-1","task_version":1,"priority":3,"queue":"hq","payload":{"n":1},` +
		`"overrides":{"pending_timeout":"1h","processing_timeout":"1m","heartbeat_timeout":"10s","max_attempts":2}}`,
		// Flow control: a task's concurrency key.
		`{"task_id":"h-2","task_version":1,"queue":"hq","concurrency_key":"tenant-42"}`},
	// The bulk actions' filters match nothing here: no queue hq-bulk, and nothing created
	// before 2000, so no single mutated field makes them act on the other routes' tasks.
	"POST /v1/tasks/bulk/cancel": {`{"queue":"hq-bulk","status":"pending","priority":3,` +
		`"created_after":"1999-01-01T00:00:00Z","created_before":"2000-01-01T00:00:00Z","max":10}`},
	"POST /v1/tasks/bulk/retry": {`{"queue":"hq-bulk","status":"failed","priority":3,` +
		`"created_after":"1999-01-01T00:00:00Z","created_before":"2000-01-01T00:00:00Z","max":10}`,
		// Flow control: the tasks of one concurrency key.
		`{"queue":"hq-bulk","concurrency_key":"tenant-42","created_before":"2000-01-01T00:00:00Z","max":10}`},
	"POST /v1/tasks/:task_id/versions/:version/result": {`{"attempt":1,"status":"success","status_code":200,"message":"ok","result":{"n":1}}`},
	"POST /v1/tasks/results": {`{"results":[{"task_id":"h-1","task_version":1,"attempt":1,"status":"success","status_code":200,"message":"ok","result":{"n":1}},` +
		`{"task_id":"h-2","task_version":1,"attempt":1,"status":"failure","status_code":500,"message":"no"}]}`},
	"POST /v1/tasks/:task_id/versions/:version/heartbeat": {`{"attempt":1,"details":{"progress":1}}`},
	"PUT /v1/queues/:name": {`{"push_url":"https://workers.example.com/push","concurrency_limit":5,"weights":[35,25,20,12,8],` +
		`"pending_timeout":"1h","processing_timeout":"1m","heartbeat_timeout":"10s",` +
		`"retry":{"initial_interval":"1s","backoff":2,"max_interval":"1m","max_attempts":3},"success_retention":"1h","purge_age":"24h"}`,
		// Flow control: per-key limit and turns, the dispatch rate.
		`{"concurrency_limit":10,"per_key_limit":6,"fair_keys":true,"key_weights":{"tenant-42":2},"dispatch_rate_per_second":5.5,"dispatch_burst":10}`},
	"PUT /v1/schedules/:id": {`{"biz_type":"orders","cron":"0 9 * * *","time_zone":"Europe/Berlin","overlap":"skip",` +
		`"catchup_window":"1m","jitter":"10s","payload":{"n":1}}`, `{"biz_type":"orders","interval":"15m","paused":true}`},
	"POST /v1/schedules/:id/pause":   {`{"note":"maintenance"}`},
	"POST /v1/pauses":                {`{"kind":"queue","name":"hq2","reason":"maintenance"}`, `{"kind":"topic","name":"orders.>"}`},
	"POST /v1/schedules/:id/unpause": {`{"note":"done"}`},
	"POST /v1/schedules/:id/trigger": {`{}`},
}

// hostileValues replace one JSON field at a time.
var hostileValues = []string{
	`null`, `true`, `0`, `-1`, `6`, `1e30`, `-1e30`, `9223372036854775808`, `-9223372036854775809`, `0.5`,
	`""`, `" "`, `"\u0000"`, `"a\u0001b"`, `"a\nb"`, `".."`, `"."`, `"a/b"`, `"%2F"`, `"заказ-✓"`, `"\ud800"`,
	`"` + strings.Repeat("x", 3000) + `"`, `{}`, `[]`, `[1,2,3]`, `{"a":{"b":{"c":[]}}}`,
	`"file:///etc/passwd"`, `"gopher://127.0.0.1:6379/_INFO"`, `"javascript:alert(1)"`, `"http://user:pw@example.com/"`,
	`"http://169.254.169.254/latest/meta-data/"`, `"http://[fd00:ec2::254]/"`, `"http://0x7f000001/"`,
	`"$JS.API.STREAM.PURGE.ORDERS"`, `"_INBOX.x"`, `"a.*"`, `"-30m"`, `"0s"`, `"99999999h"`, `"1970-01-01T00:00:00Z"`,
	`"2000-01-01T00:00:00Z"`, `"* * * * * * * *"`, `"61 25 * * *"`, `"Mars/Phobos"`, `"../../etc/localtime"`,
}

// hostileBodies are sent whole to every route that reads a body.
var hostileBodies = []string{
	``, ` `, `{`, `}`, `[]`, `"s"`, `null`, `1`, `{"unknown":1}`, `{"a":1} {}`, "{\"x\":\"\xff\xfe\"}",
	strings.Repeat("[", 5000) + strings.Repeat("]", 5000), `{"payload":` + strings.Repeat(`{"a":`, 2000) + `1` + strings.Repeat(`}`, 2000) + `}`,
}

// hostilePathValues replace one path parameter at a time; they are sent as written (already
// escaped).
var hostilePathValues = []string{
	"%00", "a%00b", "%01", "a%0Ab", "%7F", "..", ".", "%2E%2E", "a%2Fb", "%2F", "%20a", "a%20", strings.Repeat("x", 300),
	"%E2%9C%93", "%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7", "%FF", "%C0%AF", "-1", "0", "1e3", "9223372036854775808",
	"%3Cscript%3E", "a%3Ab", "%25", "%25ZZ", "%24JS.API.STREAM.PURGE.X",
}

// hostileQueries are sent to every GET route.
var hostileQueries = []string{
	"limit=-1", "limit=0", "limit=99999999999999999999", "limit=1e3", "page_size=0", "page_size=-5", "page_size=100000",
	"page_token=garbage", "page_token=%ZZ", "page_token=" + url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(`{"after":-1,"source":"x"}`))),
	"page_token=" + strings.Repeat("A", 5000), "status=%00", "status=bogus", "state=bogus", "biz_type=..", "biz_type=%00",
	"source=..%2F..", "source=%00", "include_payload=maybe", "topic=%24JS.API.%3E", "%=1", "a=%", "queue=%00",
	"paused=maybe", "paused=%00", "limit=5&page_size=5", "priority=0", "priority=%00", "concurrency_key=%00", "concurrency_key=a%2Fb", "created_after=yesterday", "created_before=%00", "created_after=2026-01-01T00:00:00Z&created_before=1970-01-01T00:00:00Z",
}

// hostileAPI is a gateway with every service on one stack, seeded with one of each resource.
type hostileAPI struct {
	s       *stack
	e       *echo.Echo
	url     string
	keys    map[apikey.Scope]string
	revoked string
	// sessions are console sessions by API key (hostile_console_test.go).
	sessions map[string]consoleSession
	valid    map[string]string // path parameter values that name the seeded resources, by route prefix and name
}

func newHostileAPI(t *testing.T) *hostileAPI {
	t.Helper()
	s := newStack(t, "sqlite")
	s.createStream("ORDERS", "orders.>")
	s.timerWorker(false)
	ctx := t.Context()
	s.bizType("orders", 0)
	_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "hbt", Delivery: courier.DeliveryMQ, Topic: "orders.hbt"})
	require.NoError(t, err)
	_, _, err = s.store.PutQueue(ctx, courier.Queue{Name: "hq"}.WithDefaults())
	require.NoError(t, err)

	svc := s.timerService()
	e := gateway.New(gateway.Config{MaxBodyBytes: 64 << 10, RequestTimeout: 20 * time.Second}, gateway.Deps{
		Keys: s.store, Outbox: s.store, Runs: relay.DeliveryRuns{Temporal: s.tc, Wait: time.Second},
		BizTypes: s.store, Timers: svc, Schedules: svc, Secrets: s.store,
		Tasks:    tasks.NewService(s.store, s.tc, s.ts.GetDefaultNamespace(), nil, nil, quiet),
		Logger:   quiet,
		Overview: s.store, TimerOverview: svc,
		Pauses: pauses.NewService(s.store, quiet),
	})
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	a := &hostileAPI{s: s, e: e, url: srv.URL, keys: map[apikey.Scope]string{}, sessions: map[string]consoleSession{}}
	for _, sc := range []apikey.Scope{apikey.ScopeAdmin, apikey.ScopeProducer, apikey.ScopeWorker} {
		_, tok, err := s.store.CreateAPIKey(ctx, "hostile-"+string(sc), []apikey.Scope{sc})
		require.NoError(t, err)
		a.keys[sc] = tok
	}
	k, tok, err := s.store.CreateAPIKey(ctx, "revoked", []apikey.Scope{apikey.ScopeAdmin})
	require.NoError(t, err)
	a.signInConsole(t, tok) // a session the revocation must end
	require.NoError(t, s.store.RevokeAPIKey(ctx, k.ID))
	a.revoked = tok
	for _, sc := range []apikey.Scope{apikey.ScopeAdmin, apikey.ScopeProducer} {
		a.signInConsole(t, a.keys[sc])
	}
	// A worker key may not read the console (the API's reads need the producer scope): its
	// sign-in is refused and it has no session; the sweep sends its requests without one.
	form := a.loginForm(t)
	status, hdr, raw := a.send(t, "POST", "/console/login", "", "", "application/x-www-form-urlencoded",
		[]byte(url.Values{"csrf": {form.csrf}, "key": {a.keys[apikey.ScopeWorker]}}.Encode()), "Cookie", form.cookie)
	require.Equal(t, http.StatusForbidden, status, "%s", raw)
	require.Empty(t, cookieOf(hdr, "courier_console"), "no session for a worker key")

	// One of each resource, so valid paths reach real handlers and real state.
	ids, err := outbox.Enqueue(ctx, s.store.DB(), outbox.Message{Topic: "orders.created", Payload: []byte(`{}`)})
	require.NoError(t, err)
	_, err = s.store.MarkOutboxDead(ctx, ids[0], "seeded")
	require.NoError(t, err)
	_, _, err = svc.Create(ctx, api.TimerRequest{BizType: "orders", BizID: "o-1", When: api.At(time.Now().Add(1000 * time.Hour))})
	require.NoError(t, err)
	_, err = svc.CreateSchedule(ctx, "s-1", api.ScheduleSpec{BizType: "orders", Cron: "0 9 * * *"})
	require.NoError(t, err)
	_, _, err = s.store.InsertTask(ctx, courier.TaskRequest{TaskID: "t-1", Version: 1, Priority: 3, Queue: "hq", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, _, err = s.store.Pause(ctx, courier.Pause{Kind: courier.PauseQueue, Name: "hq", Reason: "seeded"})
	require.NoError(t, err)
	a.valid = map[string]string{
		"outbox:id": fmt.Sprint(ids[0]), "biz-types:name": "hbt", "timers:biz_type": "orders", "timers:biz_id": "o-1",
		"tasks:task_id": "t-1", "tasks:version": "1", "queues:name": "hq", "schedules:id": "s-1", "static:name": "console.css",
		"pauses:kind": "queue", "pauses:name": "hq",
	}
	return a
}

// routes are the router's routes, as "METHOD /path", sorted so that deletes come last (they
// would remove the seeded resources the other routes use).
func (a *hostileAPI) routes(t *testing.T) []*echo.Route {
	var out []*echo.Route
	for _, r := range a.e.Routes() {
		if r.Method == echo.RouteNotFound || strings.HasSuffix(r.Path, "/*") {
			continue
		}
		_, known := routeScope[r.Method+" "+r.Path]
		_, consoleKnown := consoleRoutes[r.Method+" "+r.Path]
		require.True(t, known || consoleKnown, "route %s %s is not classified in routeScope (or consoleRoutes): say who may call it and give it a valid body", r.Method, r.Path)
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := out[i].Method == http.MethodDelete, out[j].Method == http.MethodDelete
		if di != dj {
			return dj
		}
		return out[i].Method+out[i].Path < out[j].Method+out[j].Path
	})
	require.GreaterOrEqual(t, len(out), len(routeScope)+len(consoleRoutes), "every classified route is served")
	return out
}

// path fills a route's parameters with the seeded resources' names, replacing the one named
// hostileParam with hostile.
func (a *hostileAPI) path(t *testing.T, route, hostileParam, hostile string) string {
	segs := strings.Split(route, "/")
	for i, seg := range segs {
		if !strings.HasPrefix(seg, ":") {
			continue
		}
		name := seg[1:]
		if name == hostileParam {
			segs[i] = hostile
			continue
		}
		v, ok := a.valid[segs[2]+":"+name]
		require.True(t, ok, "no seeded value for %s in %s", name, route)
		segs[i] = url.PathEscape(v)
	}
	return strings.Join(segs, "/")
}

func params(route string) []string {
	var out []string
	for _, seg := range strings.Split(route, "/") {
		if strings.HasPrefix(seg, ":") {
			out = append(out, seg[1:])
		}
	}
	return out
}

// send sends a request with the path and query exactly as written, and any extra header pairs.
func (a *hostileAPI) send(t *testing.T, method, path, query, token, contentType string, body []byte, header ...string) (int, http.Header, []byte) {
	t.Helper()
	u, err := url.Parse(a.url)
	require.NoError(t, err)
	u.Opaque, u.RawQuery = "//"+u.Host+path, query
	req := &http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}, ContentLength: int64(len(body)),
		Body: io.NopCloser(bytes.NewReader(body))}
	if len(body) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirects.Do(req)
	require.NoError(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, raw
}

// snapshot digests every table courier writes for requests (not keys, whose last use is
// recorded, nor settings, where the gateway keeps the key it generates on first use).
func (a *hostileAPI) snapshot(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	a.settle(t)
	var tables []string
	require.NoError(t, a.s.store.DB().NewRaw(`SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'courier%' AND name NOT IN ('courier_api_keys', 'courier_settings') ORDER BY name`).Scan(ctx, &tables))
	require.NotEmpty(t, tables)
	h := sha256.New()
	for _, tb := range tables {
		rows, err := a.s.store.DB().QueryContext(ctx, "SELECT * FROM "+tb+" ORDER BY 1")
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			require.NoError(t, rows.Scan(ptrs...))
			fmt.Fprintf(h, "%s %v\n", tb, vals)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// settle waits until no timer is due but not yet delivered: an accepted request may have made a
// timer due (a fire time in the past is allowed), and its run then claims and ends its row
// after the request was answered, which is no later request's doing.
func (a *hostileAPI) settle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := a.s.store.DB().NewRaw("SELECT COUNT(*) FROM courier_timers WHERE state = 'firing'"+
			" OR (state = 'scheduled' AND fire_at <= strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'))").Scan(t.Context(), &n)
		require.NoError(t, err)
		return n == 0
	}, 30*time.Second, 10*time.Millisecond, "the timers accepted requests made due are delivered")
}

// hostileCase is one request of the hostile table.
type hostileCase struct {
	what                  string
	method, path, query   string
	contentType           string
	body                  []byte
	serverRefusesOutright bool // net/http itself answers (an unparseable request line), before courier
}

func (a *hostileAPI) cases(t *testing.T, r *echo.Route) []hostileCase {
	key := r.Method + " " + r.Path
	valid := a.path(t, r.Path, "", "")
	bodies := validBodies[key]
	base := []byte(nil)
	if len(bodies) > 0 {
		base = []byte(bodies[0])
	}
	var out []hostileCase
	add := func(c hostileCase) {
		if c.contentType == "" && len(c.body) > 0 {
			c.contentType = "application/json"
		}
		out = append(out, c)
	}
	for _, p := range params(r.Path) {
		for _, v := range hostilePathValues {
			add(hostileCase{what: "path " + p + "=" + v, method: r.Method, path: a.path(t, r.Path, p, v), body: base})
		}
		add(hostileCase{what: "path " + p + " bad escape", method: r.Method, path: a.path(t, r.Path, p, "%ZZ"), body: base, serverRefusesOutright: true})
	}
	if r.Method == http.MethodDelete {
		return out // a valid delete removes the seeded resource; the path cases above are enough
	}
	if r.Method == http.MethodGet {
		for _, q := range hostileQueries {
			add(hostileCase{what: "query " + q, method: r.Method, path: valid, query: q})
		}
		return out
	}
	for _, b := range hostileBodies {
		add(hostileCase{what: "body " + abbreviate(b), method: r.Method, path: valid, body: []byte(b)})
	}
	add(hostileCase{what: "body over the limit", method: r.Method, path: valid, body: bytes.Repeat([]byte(" "), 70<<10)})
	add(hostileCase{what: "text/plain", method: r.Method, path: valid, body: base, contentType: "text/plain"})
	for _, b := range bodies {
		for _, m := range mutations(t, []byte(b)) {
			add(hostileCase{what: "field " + m.what, method: r.Method, path: valid, body: m.body})
		}
	}
	return out
}

type mutation struct {
	what string
	body []byte
}

// mutations replace each field of a JSON object (nested objects too, one level down) with each
// hostile value in turn, and also drop it.
func mutations(t *testing.T, body []byte) []mutation {
	var obj map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &obj))
	var out []mutation
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		orig := obj[k]
		for _, v := range hostileValues {
			obj[k] = json.RawMessage(v)
			out = append(out, mutation{k + "=" + abbreviate(v), marshalRaw(t, obj)})
		}
		delete(obj, k)
		out = append(out, mutation{k + " left out", marshalRaw(t, obj)})
		obj[k] = orig
		var inner map[string]json.RawMessage
		if json.Unmarshal(orig, &inner) == nil && len(inner) > 0 {
			for _, m := range mutations(t, orig) {
				obj[k] = m.body
				out = append(out, mutation{k + "." + m.what, marshalRaw(t, obj)})
			}
			obj[k] = orig
		}
	}
	return out
}

func marshalRaw(t *testing.T, obj map[string]json.RawMessage) []byte {
	b, err := json.Marshal(obj)
	require.NoError(t, err)
	return b
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return fmt.Sprintf("%q…(%d bytes)", s[:20], len(s))
	}
	return s
}

// Every route, every hostile input: never a 5xx, always courier's JSON error shape with a stable
// code, and a refused request writes nothing (the database is digested before and after; the
// Temporal side is checked at the end: only requests that were accepted started anything).
func TestEveryRouteRefusesHostileInput(t *testing.T) {
	a := newHostileAPI(t)
	known := map[courier.Code]bool{}
	for _, c := range []courier.Code{courier.CodeInvalid, courier.CodeValidation, courier.CodeNotFound, courier.CodeConflict,
		courier.CodeTooLarge, courier.CodeUnsupportedMedia, courier.CodeMethodNotAllowed} {
		known[c] = true
	}
	before := a.snapshot(t)
	accepted := map[string]bool{} // workflow ids and schedule ids that accepted requests may have created
	for _, id := range []string{courier.TimerWorkflowID("orders", "o-1")} {
		accepted[id] = true
	}
	n := 0
	for _, r := range a.routes(t) {
		if isConsoleRoute(r.Path) {
			n += a.hostileConsole(t, r, &before)
			continue
		}
		scope := routeScope[r.Method+" "+r.Path]
		token := a.keys[apikey.ScopeAdmin]
		if scope == apikey.ScopeWorker {
			token = a.keys[apikey.ScopeWorker]
		}
		for _, c := range a.cases(t, r) {
			n++
			status, hdr, raw := a.send(t, c.method, c.path, c.query, token, c.contentType, c.body)
			where := fmt.Sprintf("%s %s?%s (%s): %d %s", c.method, abbreviate(c.path), abbreviate(c.query), c.what, status, abbreviate(string(raw)))
			require.Less(t, status, 500, where)
			if c.serverRefusesOutright {
				require.Equal(t, http.StatusBadRequest, status, where)
				continue
			}
			if status >= 400 {
				require.Contains(t, hdr.Get("Content-Type"), "application/json", where)
				var eb api.ErrorBody
				require.NoError(t, json.Unmarshal(raw, &eb), where)
				require.True(t, known[eb.Error.Code], "a stable client-error code: %s", where)
				require.NotEmpty(t, eb.Error.Message, where)
				after := a.snapshot(t)
				require.Equal(t, before, after, "a refused request writes nothing: %s", where)
				continue
			}
			before = a.snapshot(t)
			noteAccepted(t, accepted, c, raw)
		}
	}
	t.Logf("%d hostile requests over %d routes", n, len(a.routes(t)))

	// Temporal: every timer workflow and schedule belongs to an accepted request. Visibility
	// lags the starts a little: wait until it shows every accepted timer, then nothing else may
	// be there.
	ctx := t.Context()
	timerIDs := func() map[string]bool {
		ids := map[string]bool{}
		var token []byte
		for {
			resp, err := a.s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: a.s.ts.GetDefaultNamespace(), PageSize: 1000, NextPageToken: token})
			require.NoError(t, err)
			for _, ex := range resp.GetExecutions() {
				if id := ex.GetExecution().GetWorkflowId(); strings.HasPrefix(id, "timer/") {
					ids[id] = true
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				return ids
			}
		}
	}
	var listed map[string]bool
	require.Eventually(t, func() bool {
		listed = timerIDs()
		for id := range accepted {
			if strings.HasPrefix(id, "timer/") && !listed[id] {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "visibility shows every accepted timer")
	for id := range listed {
		require.True(t, accepted[id], "workflow %s was started by a request that was refused", id)
	}
	it, err := a.s.tc.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	require.NoError(t, err)
	for it.HasNext() {
		sch, err := it.Next()
		require.NoError(t, err)
		require.True(t, accepted["schedule:"+sch.ID] || sch.ID == courier.ScheduleID("s-1"), "schedule %s was created by a request that was refused", sch.ID)
	}
}

// noteAccepted records what an accepted request may have created in Temporal.
func noteAccepted(t *testing.T, accepted map[string]bool, c hostileCase, raw []byte) {
	var body struct {
		BizType string `json:"biz_type"`
		BizID   string `json:"biz_id"`
		ID      string `json:"id"`
	}
	_ = json.Unmarshal(raw, &body)
	if body.BizType != "" && body.BizID != "" {
		accepted[courier.TimerWorkflowID(body.BizType, body.BizID)] = true
	}
	if body.ID != "" {
		accepted["schedule:"+courier.ScheduleID(body.ID)] = true
	}
}

// Every route × every key situation: no key, a malformed key, an unknown key and a revoked key
// are 401; a key without the route's scope is 403; the route's scope (and admin) pass auth.
func TestAuthEveryRoute(t *testing.T) {
	a := newHostileAPI(t)
	for _, r := range a.routes(t) {
		key := r.Method + " " + r.Path
		if isConsoleRoute(r.Path) {
			t.Run(key, func(t *testing.T) { a.consoleAuth(t, r) })
			continue
		}
		scope := routeScope[key]
		path := a.path(t, r.Path, "", "")
		var body []byte
		if b := validBodies[key]; len(b) > 0 {
			body = []byte(b[0])
		}
		ct := ""
		if len(body) > 0 {
			ct = "application/json"
		}
		if r.Method == http.MethodDelete {
			path = a.path(t, r.Path, params(r.Path)[len(params(r.Path))-1], "does-not-exist")
		}
		t.Run(key, func(t *testing.T) {
			check := func(who, token string, want int, code courier.Code) {
				t.Helper()
				status, _, raw := a.send(t, r.Method, path, "", token, ct, body)
				require.Equal(t, want, status, "%s: %s", who, raw)
				var eb api.ErrorBody
				require.NoError(t, json.Unmarshal(raw, &eb), who)
				require.Equal(t, code, eb.Error.Code, who)
			}
			if scope == "" {
				status, _, _ := a.send(t, r.Method, path, "", "", ct, body)
				require.Contains(t, []int{200, 503}, status, "public route answers without a key")
				return
			}
			check("no key", "", 401, courier.CodeUnauthenticated)
			check("malformed key", "not-a-key", 401, courier.CodeUnauthenticated)
			check("unknown key", "ck_"+strings.Repeat("0", 40), 401, courier.CodeUnauthenticated)
			check("revoked key", a.revoked, 401, courier.CodeUnauthenticated)
			for _, sc := range []apikey.Scope{apikey.ScopeAdmin, apikey.ScopeProducer, apikey.ScopeWorker} {
				status, _, raw := a.send(t, r.Method, path, "", a.keys[sc], ct, body)
				if sc == scope || sc == apikey.ScopeAdmin {
					require.NotContains(t, []int{401, 403}, status, "%s may call it: %s", sc, raw)
					require.Less(t, status, 500, "%s: %s", sc, raw)
					continue
				}
				require.Equal(t, 403, status, "%s must be refused: %s", sc, raw)
				var eb api.ErrorBody
				require.NoError(t, json.Unmarshal(raw, &eb))
				require.Equal(t, courier.CodePermissionDenied, eb.Error.Code)
			}
		})
	}
}

// The validation gaps an audit found, each closed: all-zero queue weights are refused rather
// than read as the defaults; a URL with user info is refused and its password never echoed;
// schedule pause, unpause and trigger parse their body like every other route (a malformed or
// oversized body — chunked too — is refused and the schedule is left as it was).
func TestValidationGapsClosed(t *testing.T) {
	a := newHostileAPI(t)
	admin, producer := a.keys[apikey.ScopeAdmin], a.keys[apikey.ScopeProducer]
	errorOf := func(raw []byte) api.ErrorBody {
		var eb api.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &eb), "%s", raw)
		return eb
	}

	status, _, raw := a.send(t, "PUT", "/v1/queues/hq", "", admin, "application/json", []byte(`{"weights":[0,0,0,0,0]}`))
	require.Equal(t, http.StatusUnprocessableEntity, status, "%s", raw)
	require.Equal(t, "weights", errorOf(raw).Error.Details["field"])
	q, err := a.s.store.GetQueue(t.Context(), "hq")
	require.NoError(t, err)
	require.Equal(t, courier.DefaultBandWeights, q.Weights, "the queue is unchanged")

	for _, c := range []struct{ path, body, field string }{
		{"/v1/queues/hq", `{"push_url":"https://ops:hunter2@workers.example.com/push"}`, "push_url"},
		{"/v1/biz-types/hbt", `{"delivery":"http","callback_url":"https://ops:hunter2@hooks.example.com/cb"}`, "callback_url"},
	} {
		status, _, raw := a.send(t, "PUT", c.path, "", admin, "application/json", []byte(c.body))
		require.Equal(t, http.StatusUnprocessableEntity, status, "%s: %s", c.path, raw)
		require.Equal(t, c.field, errorOf(raw).Error.Details["field"])
		require.NotContains(t, string(raw), "hunter2", "the password is never echoed")
		_, _, got := a.send(t, "GET", c.path, "", admin, "", nil)
		require.NotContains(t, string(got), "hunter2", "nothing was stored")
	}

	paused := func() bool {
		_, _, raw := a.send(t, "GET", "/v1/schedules/s-1", "", producer, "", nil)
		var sc struct {
			Paused bool `json:"paused"`
		}
		require.NoError(t, json.Unmarshal(raw, &sc))
		return sc.Paused
	}
	for _, action := range []string{"pause", "trigger"} {
		status, _, raw := a.send(t, "POST", "/v1/schedules/s-1/"+action, "", producer, "application/json", []byte(`{"note":`))
		require.Equal(t, http.StatusBadRequest, status, "%s with a malformed body: %s", action, raw)
		status, _ = a.sendChunked(t, "/v1/schedules/s-1/"+action, producer, bytes.Repeat([]byte(" "), 70<<10))
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s with an oversized chunked body", action)
	}
	require.False(t, paused(), "refused pauses left the schedule running")
	status, _, raw = a.send(t, "POST", "/v1/schedules/s-1/pause", "", producer, "application/json", []byte(`{"note":"maintenance"}`))
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.True(t, paused())
	status, _, raw = a.send(t, "POST", "/v1/schedules/s-1/unpause", "", producer, "", nil)
	require.Equal(t, http.StatusOK, status, "an empty body is fine: %s", raw)
	require.False(t, paused())
}

// sendChunked posts body without a Content-Length (chunked transfer encoding).
func (a *hostileAPI) sendChunked(t *testing.T, path, token string, body []byte) (int, []byte) {
	t.Helper()
	// A reader of unknown length: the client sends it chunked, with no Content-Length.
	req, err := http.NewRequest("POST", a.url+path, io.MultiReader(bytes.NewReader(body)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}
