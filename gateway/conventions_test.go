package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/timers"
)

// memSchedules keeps schedules in memory, with the Temporal service's answers: an existing id
// on create and a missing one on update are conflict and not_found.
type memSchedules struct {
	gateway.ScheduleService
	mu    sync.Mutex
	specs map[string]api.ScheduleSpec
	lists []timers.ScheduleQuery
}

func (m *memSchedules) CreateSchedule(_ context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.specs[id]; ok {
		return api.Schedule{}, courier.Errorf(courier.CodeConflict, "schedule %q already exists", id)
	}
	m.specs[id] = sp
	return m.shown(id), nil
}

func (m *memSchedules) UpdateSchedule(_ context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.specs[id]; !ok {
		return api.Schedule{}, courier.Errorf(courier.CodeNotFound, "no schedule %q", id)
	}
	m.specs[id] = sp
	return m.shown(id), nil
}

func (m *memSchedules) GetSchedule(_ context.Context, id string) (api.Schedule, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.specs[id]; !ok {
		return api.Schedule{}, courier.Errorf(courier.CodeNotFound, "no schedule %q", id)
	}
	return m.shown(id), nil
}

func (m *memSchedules) shown(id string) api.Schedule {
	return api.Schedule{ID: id, Spec: m.specs[id], Paused: m.specs[id].Paused, NextRuns: []time.Time{}, RecentRuns: []time.Time{}}
}

// ListSchedulePage pages by id, q.Limit at a time; the token is the last id of the page.
func (m *memSchedules) ListSchedulePage(_ context.Context, q timers.ScheduleQuery, token []byte) ([]api.Schedule, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists = append(m.lists, q)
	var ids []string
	for id, sp := range m.specs {
		if (q.BizType == "" || sp.BizType == q.BizType) && (q.Paused == nil || sp.Paused == *q.Paused) && id > string(token) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var next []byte
	if len(ids) > q.Limit {
		ids, next = ids[:q.Limit], []byte(ids[q.Limit-1])
	}
	out := make([]api.Schedule, len(ids))
	for i, id := range ids {
		out[i] = m.shown(id)
	}
	return out, next, nil
}

// pagedTimers records the list queries the gateway passes on.
type pagedTimers struct {
	gateway.TimerService
	mu      sync.Mutex
	queries []timers.ListQuery
}

func (p *pagedTimers) List(_ context.Context, q timers.ListQuery, _ []byte) ([]api.Timer, []byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queries = append(p.queries, q)
	return []api.Timer{}, nil, nil
}

func (p *pagedTimers) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queries)
}

func (p *pagedTimers) last() timers.ListQuery {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queries[len(p.queries)-1]
}

// storeQueues is the canned task service with the queue methods of the real store, so a queue
// deletion meets the store's rule through HTTP.
type storeQueues struct {
	*cannedTasks
	st *store.Store
}

func (s storeQueues) PutQueue(ctx context.Context, q courier.Queue) (courier.Queue, bool, error) {
	return s.st.PutQueue(ctx, q)
}
func (s storeQueues) GetQueue(ctx context.Context, name string) (courier.Queue, error) {
	return s.st.GetQueue(ctx, name)
}
func (s storeQueues) ListQueues(ctx context.Context) ([]courier.Queue, error) {
	return s.st.ListQueues(ctx)
}
func (s storeQueues) DeleteQueue(ctx context.Context, name string) error {
	return s.st.DeleteQueue(ctx, name)
}

type conventionFixture struct {
	*taskFixture
	schedules *memSchedules
	timers    *pagedTimers
}

func setupConventions(t *testing.T) *conventionFixture {
	t.Helper()
	st, _ := testenv.Store(t, "sqlite")
	mk := func(s apikey.Scope) string {
		_, tok, err := st.CreateAPIKey(t.Context(), string(s), []apikey.Scope{s})
		require.NoError(t, err)
		return tok
	}
	svc := newCannedTasks()
	sc := &memSchedules{specs: map[string]api.ScheduleSpec{}}
	tm := &pagedTimers{}
	h := gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Tasks: storeQueues{svc, st}, Schedules: sc, Timers: tm,
		Gatherer: prometheus.NewRegistry()})
	srv := newServer(t, h)
	return &conventionFixture{
		taskFixture: &taskFixture{
			fixture: &fixture{url: srv.URL, st: st, admin: mk(apikey.ScopeAdmin), producer: mk(apikey.ScopeProducer), worker: mk(apikey.ScopeWorker)},
			svc:     svc,
		},
		schedules: sc, timers: tm,
	}
}

// DELETE /v1/queues/{name} deletes a queue without unfinished tasks (204), refuses one that has
// some (409, the counts in details) and leaves it as it was; then the queue is gone (404).
func TestDeleteQueueAPI(t *testing.T) {
	t.Parallel()
	f := setupConventions(t)
	ctx := t.Context()
	st, eb := f.call(t, "PUT", "/v1/queues/reports", f.admin, `{"concurrency_limit":2}`, nil)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	_, _, err := f.st.InsertTask(ctx, courier.TaskRequest{TaskID: "r-1", Version: 1, Queue: "reports", Priority: 3, Payload: []byte(`{}`)})
	require.NoError(t, err)

	st, eb = f.call(t, "DELETE", "/v1/queues/reports", f.admin, "", nil)
	require.Equal(t, http.StatusConflict, st, "%+v", eb)
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	require.EqualValues(t, 1, eb.Error.Details["pending"])
	require.EqualValues(t, 0, eb.Error.Details["processing"])
	st, _ = f.call(t, "GET", "/v1/queues/reports", f.admin, "", nil)
	require.Equal(t, http.StatusOK, st, "a refused delete leaves the queue")

	_, _, err = f.st.CancelTask(ctx, "r-1", 1)
	require.NoError(t, err)
	st, eb = f.call(t, "DELETE", "/v1/queues/reports", f.admin, "", nil)
	require.Equal(t, http.StatusNoContent, st, "%+v", eb)
	st, eb = f.call(t, "GET", "/v1/queues/reports", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
	st, eb = f.call(t, "DELETE", "/v1/queues/reports", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, st, "a repeat finds nothing: %+v", eb)

	st, eb = f.call(t, "DELETE", "/v1/queues/Bad%20Name", f.admin, "", nil)
	require.Equal(t, http.StatusBadRequest, st)
	require.Equal(t, courier.CodeInvalid, eb.Error.Code)
	require.Equal(t, "name", eb.Error.Details["field"])
	st, _ = f.call(t, "DELETE", "/v1/queues/default", f.producer, "", nil)
	require.Equal(t, http.StatusForbidden, st, "deleting a queue needs the admin scope")
}

// PUT /v1/schedules/{id} creates (201) and replaces (200); with If-None-Match: * it only
// creates (409 on an existing id). POST and PATCH, the verbs before the rename, are refused
// (405, nothing changed): courier keeps no aliases before 1.0.
func TestPutSchedule(t *testing.T) {
	t.Parallel()
	f := setupConventions(t)
	put := func(id, body, ifNoneMatch string) (*http.Response, api.ErrorBody) {
		req, err := http.NewRequest("PUT", f.url+"/v1/schedules/"+url.PathEscape(id), strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+f.producer)
		req.Header.Set("Content-Type", "application/json")
		if ifNoneMatch != "" {
			req.Header.Set("If-None-Match", ifNoneMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var eb api.ErrorBody
		if resp.StatusCode >= 400 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
		}
		return resp, eb
	}
	resp, eb := put("nightly", `{"biz_type":"report","cron":"0 2 * * *"}`, "")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%+v", eb)
	resp, eb = put("nightly", `{"biz_type":"report","cron":"0 3 * * *"}`, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%+v", eb)
	require.Equal(t, "0 3 * * *", f.schedules.specs["nightly"].Cron, "replaced")
	resp, eb = put("nightly", `{"biz_type":"report","cron":"0 4 * * *"}`, "*")
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	require.Equal(t, "0 3 * * *", f.schedules.specs["nightly"].Cron, "If-None-Match: * never replaces")
	resp, eb = put("weekly", `{"biz_type":"report","cron":"0 4 * * 1"}`, "*")
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%+v", eb)
	resp, eb = put("weekly", `{"biz_type":"report","cron":"0 4 * * 1"}`, `"v1"`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "If-None-Match", eb.Error.Details["field"])
	resp, eb = put("a/b", `{"biz_type":"report","cron":"0 4 * * 1"}`, "")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "ids have no '/'")
	require.Equal(t, courier.CodeInvalid, eb.Error.Code)

	// The verbs before the rename are gone, not aliases.
	for _, m := range []string{"POST", "PATCH"} {
		r, eb := f.do(t, m, "/v1/schedules/weekly", f.producer, "application/json", strings.NewReader(`{"biz_type":"report","cron":"0 5 * * 1"}`))
		require.Equal(t, http.StatusMethodNotAllowed, r.StatusCode, m)
		require.Equal(t, courier.CodeMethodNotAllowed, eb.Error.Code, m)
		require.Contains(t, r.Header.Get("Allow"), "PUT", m)
		require.Empty(t, r.Header.Get("Deprecation"), m)
		require.Equal(t, "0 4 * * 1", f.schedules.specs["weekly"].Cron, "%s changes nothing", m)
	}
}

// GET /v1/schedules pages with limit and page_token like every list, passes its filters on,
// and refuses bad ones (400, the parameter named) before the service.
func TestListSchedules(t *testing.T) {
	t.Parallel()
	f := setupConventions(t)
	for id, sp := range map[string]api.ScheduleSpec{
		"a": {BizType: "report"}, "b": {BizType: "report", Paused: true}, "c": {BizType: "report"}, "d": {BizType: "mail"},
	} {
		f.schedules.specs[id] = sp
	}
	var page api.SchedulePage
	st, eb := f.call(t, "GET", "/v1/schedules?biz_type=report&paused=false&limit=1", f.producer, "", &page)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Len(t, page.Items, 1)
	require.Equal(t, "a", page.Items[0].ID)
	require.NotEmpty(t, page.NextPageToken)
	no := false
	require.Equal(t, timers.ScheduleQuery{BizType: "report", Paused: &no, Limit: 1}, f.schedules.lists[len(f.schedules.lists)-1])
	st, eb = f.call(t, "GET", "/v1/schedules?biz_type=report&paused=false&limit=1&page_token="+url.QueryEscape(page.NextPageToken), f.producer, "", &page)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Len(t, page.Items, 1)
	require.Equal(t, "c", page.Items[0].ID)
	require.Empty(t, page.NextPageToken, "the last page")

	st, eb = f.call(t, "GET", "/v1/schedules", f.producer, "", &page)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Len(t, page.Items, 4)
	require.Equal(t, 100, f.schedules.lists[len(f.schedules.lists)-1].Limit, "the default page")

	calls := len(f.schedules.lists)
	for _, bad := range []struct{ query, field string }{
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"paused=maybe", "paused"},
		{"biz_type=Not%20A%20Name", "biz_type"},
		{"page_token=forged", "page_token"},
	} {
		st, eb := f.call(t, "GET", "/v1/schedules?"+bad.query, f.producer, "", nil)
		require.Equal(t, http.StatusBadRequest, st, bad.query)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code, bad.query)
		require.Equal(t, bad.field, eb.Error.Details["field"], bad.query)
	}
	require.Equal(t, calls, len(f.schedules.lists), "refused lists never reach the service")
	st, _ = f.call(t, "GET", "/v1/schedules", f.worker, "", nil)
	require.Equal(t, http.StatusForbidden, st, "listing needs the producer scope")
}

// GET /v1/timers pages with limit, as every list does; page_size, its old name, is refused
// (400 naming limit), alone or beside limit, never ignored: courier keeps no aliases before 1.0.
func TestTimerListTakesLimit(t *testing.T) {
	t.Parallel()
	f := setupConventions(t)
	r, eb := f.do(t, "GET", "/v1/timers?limit=5", f.producer, "", nil)
	require.Equal(t, http.StatusOK, r.StatusCode, "%+v", eb)
	require.Equal(t, 5, f.timers.last().PageSize)
	require.Empty(t, r.Header.Get("Deprecation"))
	r, _ = f.do(t, "GET", "/v1/timers", f.producer, "", nil)
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Equal(t, 100, f.timers.last().PageSize, "the default page")
	for _, bad := range []struct{ query, field string }{
		{"limit=5&page_size=5", "page_size"},
		{"limit=0", "limit"},
		{"page_size=7", "page_size"},
		{"page_size=", "page_size"},
	} {
		calls := f.timers.count()
		r, eb := f.do(t, "GET", "/v1/timers?"+bad.query, f.producer, "", nil)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, bad.query)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code)
		require.Equal(t, bad.field, eb.Error.Details["field"], bad.query)
		if bad.field == "page_size" {
			require.Equal(t, "limit", eb.Error.Details["use"], bad.query)
			require.Contains(t, eb.Error.Message, "renamed limit", bad.query)
		}
		require.Equal(t, calls, f.timers.count(), "%s never reaches the service", bad.query)
	}
}

// The conventions of docs/api.md, checked on the OpenAPI document (which
// TestOpenAPICoversEveryRoute ties to the routes served):
//   - every list pages with limit and page_token and answers next_page_token, with no
//     exception;
//   - time filters are <field>_after and <field>_before;
//   - every bulk action answers matched, done, skipped and more;
//   - PUT creates or replaces the resource its path names, POST to a path ending in an id is
//     an action (…/{id}/redrive), PATCH only moves a timer, and DELETE answers 204, or 200 with
//     what it cancelled or lifted;
//   - nothing is deprecated: courier renames without aliases before 1.0 (CHANGELOG.md).
func TestOpenAPIConventions(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	bulk := map[string]bool{"/v1/outbox/redrive": true, "/v1/timers/redeliver": true, "/v1/tasks/bulk/cancel": true, "/v1/tasks/bulk/retry": true}
	patchable := map[string]bool{"/v1/timers/{biz_type}/{biz_id}": true}
	endsInParam := func(path string) bool { return strings.HasSuffix(path, "}") }
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			require.False(t, op.Deprecated, "%s: no deprecated operations; renames keep no alias", where)
			params := map[string]bool{}
			for _, p := range append(item.Parameters, op.Parameters...) {
				pv := p.Value
				require.False(t, pv.Deprecated, "%s: parameter %s is deprecated; renames keep no alias", where, pv.Name)
				params[pv.In+":"+pv.Name] = true
				require.NotEqual(t, "page_size", pv.Name, "%s: page with limit", where)
				if pv.In == "query" && pv.Schema != nil && pv.Schema.Value.Format == "date-time" {
					require.True(t, strings.HasSuffix(pv.Name, "_after") || strings.HasSuffix(pv.Name, "_before"),
						"%s: time filter %s is not <field>_after or <field>_before", where, pv.Name)
				}
			}
			if rb := op.RequestBody; rb != nil && rb.Value.Content.Get("application/json") != nil {
				for name, prop := range rb.Value.Content.Get("application/json").Schema.Value.Properties {
					require.False(t, prop.Value.Deprecated, "%s: field %s is deprecated; renames keep no alias", where, name)
					if prop.Value.Format == "date-time" && bulk[path] {
						require.True(t, strings.HasSuffix(name, "_after") || strings.HasSuffix(name, "_before"),
							"%s: time filter %s is not <field>_after or <field>_before", where, name)
					}
				}
			}
			var ok200 *openapi3.Schema
			if r := op.Responses.Status(http.StatusOK); r != nil && r.Value.Content.Get("application/json") != nil {
				ok200 = r.Value.Content.Get("application/json").Schema.Value
			}
			switch method {
			case http.MethodGet:
				if ok200 == nil || ok200.Properties["items"] == nil || endsInParam(path) {
					continue
				}
				require.True(t, params["query:limit"], "%s: a list takes limit", where)
				require.True(t, params["query:page_token"], "%s: a list takes page_token", where)
				require.NotNil(t, ok200.Properties["next_page_token"], "%s: a list answers next_page_token", where)
			case http.MethodPost:
				if bulk[path] {
					require.NotNil(t, ok200, where)
					_, required := flatSchema(ok200)
					require.Subset(t, required, []string{"matched", "done", "skipped", "more"}, "%s answers the bulk result", where)
				}
				if endsInParam(path) {
					require.Fail(t, "POST creates in a collection; a named resource is PUT", where)
				}
			case http.MethodPut:
				require.True(t, endsInParam(path), "%s: PUT names the resource it creates or replaces", where)
				require.NotNil(t, op.Responses.Status(http.StatusCreated), "%s: PUT answers 201 when it creates", where)
				require.NotNil(t, op.Responses.Status(http.StatusOK), "%s: PUT answers 200 when it replaces", where)
			case http.MethodPatch:
				require.True(t, patchable[path], "%s: PATCH is only a timer's reschedule", where)
			case http.MethodDelete:
				require.True(t, op.Responses.Status(http.StatusNoContent) != nil || op.Responses.Status(http.StatusOK) != nil, where)
			}
		}
	}
	for name, sr := range doc.Components.Schemas {
		props, _ := flatSchema(sr.Value)
		for field, prop := range props {
			require.False(t, prop.Value.Deprecated, "schema %s: field %s is deprecated; renames keep no alias", name, field)
		}
	}
}

// flatSchema is a schema's properties and required names, its allOf parts' included.
func flatSchema(s *openapi3.Schema) (map[string]*openapi3.SchemaRef, []string) {
	props := map[string]*openapi3.SchemaRef{}
	required := append([]string(nil), s.Required...)
	for name, p := range s.Properties {
		props[name] = p
	}
	for _, part := range s.AllOf {
		pp, rr := flatSchema(part.Value)
		for name, p := range pp {
			props[name] = p
		}
		required = append(required, rr...)
	}
	return props, required
}

// GET /v1/queues pages with limit and page_token like every list (so do /v1/biz-types and
// /v1/pauses, through the same code): by name, each queue once, next_page_token absent on the
// last page; a queue added between two pages is not skipped or repeated; a token of another
// list, or none the gateway issued, is 400.
func TestQueueListPages(t *testing.T) {
	t.Parallel()
	f := setupConventions(t)
	for _, name := range []string{"q-e", "q-a", "q-c", "q-b", "q-d"} {
		st, eb := f.call(t, "PUT", "/v1/queues/"+name, f.admin, `{"concurrency_limit":2}`, nil)
		require.Equal(t, http.StatusCreated, st, "%+v", eb)
	}
	var all api.List[api.Queue]
	st, eb := f.call(t, "GET", "/v1/queues", f.admin, "", &all)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Empty(t, all.NextPageToken, "every queue fits the default page")
	var want []string
	for _, q := range all.Items {
		want = append(want, q.Name)
	}
	require.True(t, slices.IsSorted(want), "by name: %v", want)
	require.Subset(t, want, []string{"q-a", "q-b", "q-c", "q-d", "q-e"})

	var got []string
	token, added := "", false
	for pages := 0; ; pages++ {
		require.Less(t, pages, len(want)+2, "the pages end")
		var page api.List[api.Queue]
		st, eb := f.call(t, "GET", "/v1/queues?limit=2&page_token="+url.QueryEscape(token), f.admin, "", &page)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.LessOrEqual(t, len(page.Items), 2)
		for _, q := range page.Items {
			got = append(got, q.Name)
		}
		if !added {
			// Added after the first page, its name after the page's last: it is on a later page.
			st, eb := f.call(t, "PUT", "/v1/queues/q-z", f.admin, `{"concurrency_limit":2}`, nil)
			require.Equal(t, http.StatusCreated, st, "%+v", eb)
			want, added = append(want, "q-z"), true
		}
		if page.NextPageToken == "" {
			break
		}
		if token == "" {
			st, eb := f.call(t, "GET", "/v1/schedules?page_token="+url.QueryEscape(page.NextPageToken), f.producer, "", nil)
			require.Equal(t, http.StatusBadRequest, st, "a queue list's token is not a schedule list's")
			require.Equal(t, "page_token", eb.Error.Details["field"])
		}
		token = page.NextPageToken
	}
	require.Equal(t, want, got, "each queue once, in name order")

	for _, bad := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=1001", "limit"}, {"page_token=forged", "page_token"},
	} {
		st, eb := f.call(t, "GET", "/v1/queues?"+bad.query, f.admin, "", nil)
		require.Equal(t, http.StatusBadRequest, st, bad.query)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code, bad.query)
		require.Equal(t, bad.field, eb.Error.Details["field"], bad.query)
	}
}
