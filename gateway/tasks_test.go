package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
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
)

// cannedTasks is a TaskService that answers what the test says (answer, answerTo) and records
// what the gateway passed in. It knows no rules: the store's suite covers the version rules, and
// these tests cover what the handlers do with the service's answers.
type cannedTasks struct {
	mu      sync.Mutex
	ans     answer                // what every method answers...
	by      map[string]answer     // ...but the methods named here
	calls   []fakeCall            // every call, in order
	inserts []courier.TaskRequest // Insert requests as received
	reports []api.TaskResult
	beats   []fakeBeat
	puts    []courier.Queue // PutQueue arguments as received
	lists   []courier.TaskFilter
	bulks   []fakeBulk // CancelMatching and RetryMatching arguments as received
	// release, if set, is what Report's release runs (the slot a recorded result frees).
	release func()
}

type fakeBulk struct {
	filter courier.TaskFilter
	max    int
}

// answer is what a method of cannedTasks returns: each method takes the fields its signature
// has.
type answer struct {
	task    courier.Task              // Insert, Get, Latest, Cancel
	outcome courier.TaskInsertOutcome // Insert
	queue   courier.Queue             // PutQueue, GetQueue
	created bool                      // PutQueue
	queues  []courier.Queue           // ListQueues
	tasks   []courier.Task            // List
	more    bool                      // List
	bulk    courier.TaskBulkResult    // CancelMatching, RetryMatching
	err     error                     // every method
}

type fakeCall struct {
	method  string
	id      string // task id or queue name
	version int64
}

type fakeBeat struct {
	attempt int
	details json.RawMessage
}

var fakeNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newCannedTasks() *cannedTasks { return &cannedTasks{} }

// answer sets what every method answers from now on, and forgets what answerTo set.
func (f *cannedTasks) answer(a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ans, f.by = a, nil
}

// answerTo sets what one method, by name ("GetQueue"), answers until the next answer: for a
// request whose handler calls two methods.
func (f *cannedTasks) answerTo(method string, a answer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[string]answer{}
	}
	f.by[method] = a
}

// record notes a call and returns the method's answer.
func (f *cannedTasks) record(method, id string, version int64) answer {
	f.calls = append(f.calls, fakeCall{method: method, id: id, version: version})
	if a, ok := f.by[method]; ok {
		return a
	}
	return f.ans
}

func (f *cannedTasks) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *cannedTasks) lastCall() fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return fakeCall{}
	}
	return f.calls[len(f.calls)-1]
}

func (f *cannedTasks) lastInsert() courier.TaskRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inserts[len(f.inserts)-1]
}

func (f *cannedTasks) lastPut() courier.Queue {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts[len(f.puts)-1]
}

func (f *cannedTasks) lastReport() api.TaskResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reports[len(f.reports)-1]
}

func (f *cannedTasks) lastBeat() fakeBeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats[len(f.beats)-1]
}

func (f *cannedTasks) Insert(_ context.Context, r courier.TaskRequest) (courier.Task, courier.TaskInsertOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Insert", r.TaskID, r.Version)
	f.inserts = append(f.inserts, r)
	return a.task, a.outcome, a.err
}

func (f *cannedTasks) Get(_ context.Context, taskID string, version int64) (courier.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Get", taskID, version)
	return a.task, a.err
}

func (f *cannedTasks) Latest(_ context.Context, taskID string) (courier.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Latest", taskID, 0)
	return a.task, a.err
}

func (f *cannedTasks) List(_ context.Context, filter courier.TaskFilter) ([]courier.Task, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("List", filter.Queue, 0)
	f.lists = append(f.lists, filter)
	return a.tasks, a.more, a.err
}

func (f *cannedTasks) lastList() courier.TaskFilter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists[len(f.lists)-1]
}

func (f *cannedTasks) Cancel(_ context.Context, taskID string, version int64) (courier.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Cancel", taskID, version)
	return a.task, a.err
}

func (f *cannedTasks) Report(_ context.Context, taskID string, version int64, r api.TaskResult) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Report", taskID, version)
	f.reports = append(f.reports, r)
	if f.release != nil && a.err == nil {
		return f.release, nil
	}
	return func() {}, a.err
}

func (f *cannedTasks) ReportMany(_ context.Context, results []api.TaskResultItem) ([]error, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("ReportMany", "", 0)
	errs := make([]error, len(results))
	for i, r := range results {
		f.reports = append(f.reports, r.TaskResult)
		if a.err != nil {
			errs[i] = a.err
		}
	}
	return errs, func() {}, nil
}

func (f *cannedTasks) Heartbeat(_ context.Context, taskID string, version int64, attempt int, details json.RawMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Heartbeat", taskID, version)
	f.beats = append(f.beats, fakeBeat{attempt: attempt, details: details})
	return a.err
}

func (f *cannedTasks) PutQueue(_ context.Context, q courier.Queue) (courier.Queue, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("PutQueue", q.Name, 0)
	f.puts = append(f.puts, q)
	return a.queue, a.created, a.err
}

func (f *cannedTasks) GetQueue(_ context.Context, name string) (courier.Queue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("GetQueue", name, 0)
	return a.queue, a.err
}

func (f *cannedTasks) ListQueues(context.Context) ([]courier.Queue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("ListQueues", "", 0)
	return a.queues, a.err
}

func (f *cannedTasks) DeleteQueue(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record("DeleteQueue", name, 0).err
}

func (f *cannedTasks) Retry(_ context.Context, taskID string, version int64) (courier.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("Retry", taskID, version)
	return a.task, a.err
}

func (f *cannedTasks) CancelMatching(_ context.Context, tf courier.TaskFilter, max int) (courier.TaskBulkResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("CancelMatching", "", 0)
	f.bulks = append(f.bulks, fakeBulk{filter: tf, max: max})
	return a.bulk, a.err
}

func (f *cannedTasks) RetryMatching(_ context.Context, tf courier.TaskFilter, max int) (courier.TaskBulkResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.record("RetryMatching", "", 0)
	f.bulks = append(f.bulks, fakeBulk{filter: tf, max: max})
	return a.bulk, a.err
}

var _ gateway.TaskService = (*cannedTasks)(nil)

// Errors as the task service words them (tasks.Service, store.Store).
func notFound(id string, version int64) error {
	return courier.Errorf(courier.CodeNotFound, "task %q version %d not found", id, version)
}

func conflict(msg string, details map[string]any) error {
	return &courier.Error{Code: courier.CodeConflict, Message: msg, Details: details}
}

func invalidField(field, msg string) error {
	return &courier.Error{Code: courier.CodeValidation, Message: msg, Details: map[string]any{"field": field}}
}

type taskFixture struct {
	*fixture
	svc *cannedTasks
}

// setupTasks serves the gateway with the canned task service, the default body limit (so the
// payload limit, not the body limit, is what a large payload meets) and real API keys.
func setupTasks(t *testing.T) *taskFixture {
	t.Helper()
	st, _ := testenv.Store(t, "sqlite")
	mk := func(s apikey.Scope) string {
		_, tok, err := st.CreateAPIKey(t.Context(), string(s), []apikey.Scope{s})
		require.NoError(t, err)
		return tok
	}
	svc := newCannedTasks()
	h := gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Tasks: svc, Gatherer: prometheus.NewRegistry()})
	srv := newServer(t, h)
	t.Cleanup(srv.Close)
	return &taskFixture{
		fixture: &fixture{url: srv.URL, st: st, admin: mk(apikey.ScopeAdmin), producer: mk(apikey.ScopeProducer), worker: mk(apikey.ScopeWorker)},
		svc:     svc,
	}
}

// call sends a JSON body (if any) and decodes a success response into out (if given).
func (f *taskFixture) call(t *testing.T, method, path, token, body string, out any) (int, api.ErrorBody) {
	t.Helper()
	var r io.Reader
	ct := ""
	if body != "" {
		r, ct = strings.NewReader(body), "application/json"
	}
	resp, eb := f.do(t, method, path, token, ct, r)
	if out != nil && resp.StatusCode < 400 {
		reflect.ValueOf(out).Elem().SetZero()
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	return resp.StatusCode, eb
}

// storedQueue is a queue as the service returns it: its defaults filled in, with timestamps.
func storedQueue(q courier.Queue) courier.Queue {
	q = q.WithDefaults()
	q.CreatedAt, q.UpdatedAt = fakeNow, fakeNow
	return q
}

func processing(id string, version int64, attempt int) courier.Task {
	pushed := fakeNow
	return courier.Task{TaskID: id, Version: version, Queue: "default", Priority: 3, Status: courier.TaskProcessing,
		Payload: json.RawMessage(`{}`), Attempt: attempt, Attempts: 1, CreatedAt: fakeNow, UpdatedAt: fakeNow,
		NextAttemptAt: fakeNow, ClaimedAt: &pushed, PushedAt: &pushed}
}

// pending is a task as the service returns a pending one, with the service's defaults.
func pending(id string, version int64, payload string) courier.Task {
	expires := fakeNow.Add(24 * time.Hour)
	return courier.Task{TaskID: id, Version: version, Queue: "default", Priority: 3, Status: courier.TaskPending,
		Payload: json.RawMessage(payload), CreatedAt: fakeNow, UpdatedAt: fakeNow, NextAttemptAt: fakeNow, ExpiresAt: &expires}
}

func TestInsertTask(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)

	var got api.Task
	f.svc.answer(answer{task: pending("t-1", 1, `{"a":1}`), outcome: courier.TaskCreated})
	st, eb := f.call(t, "POST", "/v1/tasks", f.producer, `{"task_id":"t-1","task_version":1,"payload":{"a":1}}`, &got)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	require.EqualValues(t, "created", got.Outcome)
	require.Equal(t, "t-1", got.TaskID)
	require.EqualValues(t, 1, got.TaskVersion)
	require.EqualValues(t, "pending", got.Status)
	require.JSONEq(t, `{"a":1}`, string(got.Payload))
	require.Equal(t, "task/t-1/1", got.WorkflowID)
	require.NotNil(t, got.NextAttemptAt, "a pending task shows when it may next be claimed")
	require.NotNil(t, got.ExpiresAt)
	require.Equal(t, api.TaskOverrides{}, got.Overrides)
	require.Equal(t, courier.TaskRequest{TaskID: "t-1", Version: 1, Payload: json.RawMessage(`{"a":1}`)}, f.svc.lastInsert(),
		"defaults are the service's: priority, queue and overrides arrive unset")
	require.Equal(t, 3, got.Priority, "the service's defaults show in the response")
	require.Equal(t, "default", got.Queue)

	body := `{"task_id":"t-2","task_version":4,"priority":1,"queue":"emails","payload":"hi",
		"overrides":{"pending_timeout":"30s","processing_timeout":"2m","heartbeat_timeout":"1500ms","max_attempts":5}}`
	overrides := courier.TaskOverrides{PendingTimeout: 30 * time.Second, ProcessingTimeout: 2 * time.Minute,
		HeartbeatTimeout: 1500 * time.Millisecond, MaxAttempts: 5}
	t2 := pending("t-2", 4, `"hi"`)
	t2.Priority, t2.Queue, t2.Overrides = 1, "emails", overrides
	f.svc.answer(answer{task: t2, outcome: courier.TaskCreated})
	st, eb = f.call(t, "POST", "/v1/tasks", f.producer, body, &got)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	require.Equal(t, courier.TaskRequest{TaskID: "t-2", Version: 4, Priority: 1, Queue: "emails", Payload: json.RawMessage(`"hi"`),
		Overrides: overrides}, f.svc.lastInsert())
	require.Equal(t, api.TaskOverrides{PendingTimeout: api.PositiveDuration(30 * time.Second), ProcessingTimeout: api.PositiveDuration(2 * time.Minute), HeartbeatTimeout: api.PositiveDuration(1500 * time.Millisecond), MaxAttempts: 5},
		got.Overrides)
	require.Equal(t, 1, got.Priority)
	require.Equal(t, "emails", got.Queue)

	t.Run("replaced", func(t *testing.T) {
		f.svc.answer(answer{task: pending("t-1", 1, `{"a":2}`), outcome: courier.TaskReplaced})
		st, eb := f.call(t, "POST", "/v1/tasks", f.producer, `{"task_id":"t-1","task_version":1,"payload":{"a":2}}`, &got)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.EqualValues(t, "replaced", got.Outcome)
		require.JSONEq(t, `{"a":2}`, string(got.Payload))
	})
	t.Run("existing", func(t *testing.T) {
		f.svc.answer(answer{task: processing("t-3", 1, 1), outcome: courier.TaskExisting})
		st, eb := f.call(t, "POST", "/v1/tasks", f.producer, `{"task_id":"t-3","task_version":1,"payload":{"new":true}}`, &got)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.EqualValues(t, "existing", got.Outcome)
		require.EqualValues(t, "processing", got.Status)
		require.JSONEq(t, `{}`, string(got.Payload), "the answer shows the task the service has, not the request")
		require.Nil(t, got.NextAttemptAt, "only pending tasks show next_attempt_at")
		require.Nil(t, got.ExpiresAt)
	})
	t.Run("stale version", func(t *testing.T) {
		f.svc.answer(answer{err: conflict(`task "t-4" already has version 3`, map[string]any{"current_version": int64(3)})})
		st, eb := f.call(t, "POST", "/v1/tasks", f.producer, `{"task_id":"t-4","task_version":2}`, nil)
		require.Equal(t, http.StatusConflict, st)
		require.Equal(t, courier.CodeConflict, eb.Error.Code)
		require.EqualValues(t, 3, eb.Error.Details["current_version"])
	})
	t.Run("service validation", func(t *testing.T) {
		f.svc.answer(answer{err: invalidField("priority", "priority must be from 1 to 5")})
		st, eb := f.call(t, "POST", "/v1/tasks", f.producer, `{"task_id":"t-5","task_version":1,"priority":9}`, nil)
		require.Equal(t, http.StatusUnprocessableEntity, st)
		require.Equal(t, courier.CodeValidation, eb.Error.Code)
		require.Equal(t, "priority", eb.Error.Details["field"])
		require.Equal(t, 9, f.svc.lastInsert().Priority, "the service, not the gateway, judges the priority")
	})
}

// Requests the gateway refuses never reach the service.
func TestInsertTaskRejects(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	big := `{"task_id":"t","task_version":1,"payload":"` + strings.Repeat("x", gateway.MaxTaskPayloadBytes) + `"}`
	require.Less(t, len(big), gateway.DefaultMaxBodyBytes, "under the body limit: the payload limit refuses it")
	cases := []struct {
		name, body string
		status     int
		code       courier.Code
		field      string
	}{
		{"malformed", `{"task_id":"t","task_version":`, 400, courier.CodeInvalid, ""},
		{"empty", ` `, 400, courier.CodeInvalid, ""},
		{"trailing", `{"task_id":"t","task_version":1} {}`, 400, courier.CodeInvalid, ""},
		{"unknown field", `{"task_id":"t","task_version":1,"colour":"red"}`, 400, courier.CodeInvalid, ""},
		{"unknown override", `{"task_id":"t","task_version":1,"overrides":{"timeout":"1s"}}`, 400, courier.CodeInvalid, ""},
		{"wrong type", `{"task_id":"t","task_version":"1"}`, 422, courier.CodeValidation, "task_version"},
		{"wrong override type", `{"task_id":"t","task_version":1,"overrides":{"max_attempts":"5"}}`, 422, courier.CodeValidation, "overrides.max_attempts"},
		{"bad duration", `{"task_id":"t","task_version":1,"overrides":{"pending_timeout":"soon"}}`, 422, courier.CodeValidation, "overrides.pending_timeout"},
		{"negative duration", `{"task_id":"t","task_version":1,"overrides":{"processing_timeout":"-5s"}}`, 422, courier.CodeValidation, "overrides.processing_timeout"},
		{"zero duration", `{"task_id":"t","task_version":1,"overrides":{"heartbeat_timeout":"0s"}}`, 422, courier.CodeValidation, "overrides.heartbeat_timeout"},
		{"duration without unit", `{"task_id":"t","task_version":1,"overrides":{"pending_timeout":"30"}}`, 422, courier.CodeValidation, "overrides.pending_timeout"},
		{"payload too large", big, 413, courier.CodeTooLarge, "payload"},
		{"not an object", `"t"`, 400, courier.CodeInvalid, ""},
		{"an array", `[{"task_id":"t","task_version":1}]`, 400, courier.CodeInvalid, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, eb := f.call(t, "POST", "/v1/tasks", f.producer, c.body, nil)
			require.Equal(t, c.status, st, "%+v", eb)
			require.Equal(t, c.code, eb.Error.Code)
			if c.field != "" {
				require.Equal(t, c.field, eb.Error.Details["field"])
			}
		})
	}
	t.Run("limit in details", func(t *testing.T) {
		_, eb := f.call(t, "POST", "/v1/tasks", f.producer, big, nil)
		require.EqualValues(t, gateway.MaxTaskPayloadBytes, eb.Error.Details["limit_bytes"])
	})
	t.Run("not json", func(t *testing.T) {
		resp, eb := f.do(t, "POST", "/v1/tasks", f.producer, "text/plain", strings.NewReader(`{"task_id":"t","task_version":1}`))
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
		require.Equal(t, courier.CodeUnsupportedMedia, eb.Error.Code)
	})
	t.Run("body over the body limit", func(t *testing.T) {
		huge := `{"task_id":"t","task_version":1,"payload":"` + strings.Repeat("x", gateway.DefaultMaxBodyBytes) + `"}`
		st, eb := f.call(t, "POST", "/v1/tasks", f.producer, huge, nil)
		require.Equal(t, http.StatusRequestEntityTooLarge, st)
		require.Equal(t, courier.CodeTooLarge, eb.Error.Code)
	})
	require.Zero(t, f.svc.callCount(), "a refused request never reaches the service")

	// Exactly at the limit is accepted (the limit counts the payload's JSON bytes).
	f.svc.answer(answer{task: pending("t", 1, `{}`), outcome: courier.TaskCreated})
	atLimit := `{"task_id":"t","task_version":1,"payload":"` + strings.Repeat("x", gateway.MaxTaskPayloadBytes-2) + `"}`
	st, eb := f.call(t, "POST", "/v1/tasks", f.producer, atLimit, nil)
	require.Equal(t, http.StatusCreated, st, "%+v", eb)
	require.Len(t, f.svc.lastInsert().Payload, gateway.MaxTaskPayloadBytes)
}

func TestGetAndCancelTask(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	v1 := processing("t-1", 1, 2)
	v1.Status, v1.StatusCode, v1.Message, v1.Result = courier.TaskFailed, 500, "boom", json.RawMessage(`{"why":"boom"}`)
	finished := fakeNow.Add(time.Minute)
	v1.FinishedAt = &finished
	v2 := processing("t-1", 2, 3)
	v2.Status = courier.TaskPending

	var got api.Task
	f.svc.answer(answer{task: v2})
	st, eb := f.call(t, "GET", "/v1/tasks/t-1", f.producer, "", &got)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.EqualValues(t, 2, got.TaskVersion, "the version the service calls latest")
	require.Equal(t, fakeCall{"Latest", "t-1", 0}, f.svc.lastCall())

	f.svc.answer(answer{task: v1})
	st, eb = f.call(t, "GET", "/v1/tasks/t-1/versions/1", f.producer, "", &got)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, fakeCall{"Get", "t-1", 1}, f.svc.lastCall())
	require.EqualValues(t, 1, got.TaskVersion)
	require.EqualValues(t, "failed", got.Status)
	require.Equal(t, 500, got.StatusCode)
	require.Equal(t, "boom", got.Message)
	require.JSONEq(t, `{"why":"boom"}`, string(got.Result))
	require.Equal(t, 2, got.Attempt)
	require.Equal(t, "task/t-1/1", got.WorkflowID)
	require.NotNil(t, got.FinishedAt)
	require.True(t, finished.Equal(*got.FinishedAt))
	require.Nil(t, got.NextAttemptAt)

	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/tasks/t-1/versions/abc", ""},
		{"GET", "/v1/tasks/t-1/versions/0", ""},
		{"GET", "/v1/tasks/t-1/versions/-1", ""},
		{"GET", "/v1/tasks/t-1/versions/1.5", ""},
		{"GET", "/v1/tasks/t-1/versions/99999999999999999999", ""},
		{"DELETE", "/v1/tasks/t-1/versions/x", ""},
		{"POST", "/v1/tasks/t-1/versions/x/result", `{"attempt":1,"status":"success"}`},
		{"POST", "/v1/tasks/t-1/versions/0/heartbeat", `{"attempt":1}`},
	} {
		n := f.svc.callCount()
		st, eb := f.call(t, c.method, c.path, f.admin, c.body, nil)
		require.Equal(t, http.StatusBadRequest, st, "%s %s", c.method, c.path)
		require.Equal(t, courier.CodeInvalid, eb.Error.Code)
		require.Equal(t, n, f.svc.callCount(), "%s %s never reaches the service", c.method, c.path)
	}

	f.svc.answer(answer{err: courier.Errorf(courier.CodeNotFound, "task %q not found", "nope")})
	st, eb = f.call(t, "GET", "/v1/tasks/nope", f.producer, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
	f.svc.answer(answer{err: notFound("t-1", 9)})
	st, eb = f.call(t, "GET", "/v1/tasks/t-1/versions/9", f.producer, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)

	cancelled := v2
	cancelled.Status, cancelled.FinishedAt, cancelled.Message = courier.TaskCancelled, &finished, "cancelled through the API"
	f.svc.answer(answer{task: cancelled})
	st, eb = f.call(t, "DELETE", "/v1/tasks/t-1/versions/2", f.producer, "", &got)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, fakeCall{"Cancel", "t-1", 2}, f.svc.lastCall())
	require.EqualValues(t, "cancelled", got.Status)
	require.Equal(t, "cancelled through the API", got.Message)
	st, _ = f.call(t, "DELETE", "/v1/tasks/t-1/versions/2", f.producer, "", &got)
	require.Equal(t, http.StatusOK, st, "a repeated cancel, answered with the task as it is, is a 200 too")

	f.svc.answer(answer{err: conflict(`task "t-1" version 1 is failed and can no longer be cancelled`, map[string]any{"status": "failed"})})
	st, eb = f.call(t, "DELETE", "/v1/tasks/t-1/versions/1", f.producer, "", nil)
	require.Equal(t, http.StatusConflict, st, "the service's conflict passes through")
	require.Equal(t, "failed", eb.Error.Details["status"])
	f.svc.answer(answer{err: notFound("t-1", 7)})
	st, eb = f.call(t, "DELETE", "/v1/tasks/t-1/versions/7", f.producer, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
}

func TestTaskResultAndHeartbeat(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)

	var acc api.ReportAccepted
	st, eb := f.call(t, "POST", "/v1/tasks/t-1/versions/1/heartbeat", f.worker, `{"attempt":2,"details":{"progress":0.5}}`, &acc)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, api.ReportAccepted{TaskID: "t-1", TaskVersion: 1, Attempt: 2, Accepted: true}, acc)
	require.Equal(t, fakeCall{"Heartbeat", "t-1", 1}, f.svc.lastCall())
	require.Equal(t, 2, f.svc.lastBeat().attempt)
	require.JSONEq(t, `{"progress":0.5}`, string(f.svc.lastBeat().details))

	st, eb = f.call(t, "POST", "/v1/tasks/t-1/versions/1/heartbeat", f.worker, `{"attempt":2}`, &acc)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Empty(t, f.svc.lastBeat().details, "details are optional")

	st, eb = f.call(t, "POST", "/v1/tasks/t-1/versions/1/result", f.worker,
		`{"attempt":2,"status":"success","status_code":200,"message":"ok","result":{"n":1}}`, &acc)
	require.Equal(t, http.StatusAccepted, st, "%+v", eb)
	require.Equal(t, api.ReportAccepted{TaskID: "t-1", TaskVersion: 1, Attempt: 2, Accepted: true}, acc)
	require.Equal(t, fakeCall{"Report", "t-1", 1}, f.svc.lastCall())
	require.Equal(t, api.TaskResult{Attempt: 2, Status: courier.OutcomeSuccess, StatusCode: 200, Message: "ok",
		Result: json.RawMessage(`{"n":1}`)}, f.svc.lastReport())

	st, eb = f.call(t, "POST", "/v1/tasks/t-1/versions/1/result", f.admin, `{"attempt":2,"status":"failure"}`, &acc)
	require.Equal(t, http.StatusAccepted, st, "admin carries the worker scope: %+v", eb)
	require.Equal(t, courier.OutcomeFailure, f.svc.lastReport().Status)

	// An attempt that is not running: the service's conflict passes through.
	f.svc.answer(answer{err: conflict("attempt 1 of task \"t-1\" version 1 is not running (task is processing, current attempt 2)",
		map[string]any{"status": "processing", "attempt": 2})})
	st, eb = f.call(t, "POST", "/v1/tasks/t-1/versions/1/result", f.worker, `{"attempt":1,"status":"success"}`, nil)
	require.Equal(t, http.StatusConflict, st)
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	require.EqualValues(t, 2, eb.Error.Details["attempt"])
	require.Equal(t, 1, f.svc.lastReport().Attempt)
	st, eb = f.call(t, "POST", "/v1/tasks/t-1/versions/1/heartbeat", f.worker, `{"attempt":3}`, nil)
	require.Equal(t, http.StatusConflict, st)
	require.Equal(t, courier.CodeConflict, eb.Error.Code)
	require.Equal(t, 3, f.svc.lastBeat().attempt)
	f.svc.answer(answer{err: notFound("nope", 1)})
	st, eb = f.call(t, "POST", "/v1/tasks/nope/versions/1/heartbeat", f.worker, `{"attempt":1}`, nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)
	f.svc.answer(answer{})

	n := f.svc.callCount()
	for _, c := range []struct {
		name, path, body string
		status           int
		code             courier.Code
	}{
		{"result unknown field", "result", `{"attempt":2,"status":"success","output":1}`, 400, courier.CodeInvalid},
		{"result malformed", "result", `{"attempt":2,`, 400, courier.CodeInvalid},
		{"result empty", "result", ``, 400, courier.CodeInvalid},
		{"result wrong type", "result", `{"attempt":"2","status":"success"}`, 422, courier.CodeValidation},
		{"heartbeat unknown field", "heartbeat", `{"attempt":2,"progress":1}`, 400, courier.CodeInvalid},
		{"heartbeat wrong type", "heartbeat", `{"attempt":true}`, 422, courier.CodeValidation},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, eb := f.call(t, "POST", "/v1/tasks/t-1/versions/1/"+c.path, f.worker, c.body, nil)
			require.Equal(t, c.status, st, "%+v", eb)
			require.Equal(t, c.code, eb.Error.Code)
		})
	}
	require.Equal(t, n, f.svc.callCount(), "a refused body never reaches the service")
}

// Every task and queue route against no key, a bad key and each scope; admin carries all.
func TestTaskAuthMatrix(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	routes := []struct {
		method, path, body string
		scope              apikey.Scope
	}{
		{"POST", "/v1/tasks", `{"task_id":"t-1","task_version":1}`, apikey.ScopeProducer},
		{"GET", "/v1/tasks/t-1", "", apikey.ScopeProducer},
		{"GET", "/v1/tasks/t-1/versions/1", "", apikey.ScopeProducer},
		{"DELETE", "/v1/tasks/t-1/versions/1", "", apikey.ScopeProducer},
		{"POST", "/v1/tasks/t-1/versions/1/result", `{"attempt":1,"status":"success"}`, apikey.ScopeWorker},
		{"POST", "/v1/tasks/t-1/versions/1/heartbeat", `{"attempt":1}`, apikey.ScopeWorker},
		{"GET", "/v1/queues", "", apikey.ScopeAdmin},
		{"GET", "/v1/queues/default", "", apikey.ScopeAdmin},
		{"PUT", "/v1/queues/default", `{}`, apikey.ScopeAdmin},
	}
	tokens := map[string]string{"admin": f.admin, "producer": f.producer, "worker": f.worker}
	q := storedQueue(courier.Queue{Name: "default"})
	f.svc.answer(answer{task: processing("t-1", 1, 1), outcome: courier.TaskExisting, queue: q, queues: []courier.Queue{q}})
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			n := f.svc.callCount()
			for _, tok := range []string{"", "ck_nothing_real"} {
				st, eb := f.call(t, r.method, r.path, tok, r.body, nil)
				require.Equal(t, http.StatusUnauthorized, st, "key %q", tok)
				require.Equal(t, courier.CodeUnauthenticated, eb.Error.Code)
			}
			for name, tok := range tokens {
				allowed := name == "admin" || apikey.Scope(name) == r.scope
				if !allowed {
					st, eb := f.call(t, r.method, r.path, tok, r.body, nil)
					require.Equal(t, http.StatusForbidden, st, "%s must be refused", name)
					require.Equal(t, courier.CodePermissionDenied, eb.Error.Code)
				}
			}
			require.Equal(t, n, f.svc.callCount(), "refused calls never reach the service")
			for name, tok := range tokens {
				if name == "admin" || apikey.Scope(name) == r.scope {
					st, eb := f.call(t, r.method, r.path, tok, r.body, nil)
					require.Less(t, st, 400, "%s may call it: %+v", name, eb)
				}
			}
		})
	}
}

// Task ids are percent-encoded in paths; the service gets the id itself, decoded once.
func TestTaskIDInPath(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	cases := []struct {
		name, segment, id string
		knownBug          string
	}{
		{"plain", "order-1", "order-1", ""},
		{"space", "order%201", "order 1", ""},
		{"plus", "a+b", "a+b", ""},
		{"encoded plus", "a%2Bb", "a+b", ""},
		{"unicode", "caf%C3%A9", "café", ""},
		{"colon and at", "urn:x@y", "urn:x@y", ""},
		{"percent", "50%25off", "50%off", ""},
		{"escape-like id", "a%2541", "a%41", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.knownBug != "" {
				t.Skip("known bug: " + c.knownBug)
			}
			f.svc.answer(answer{task: processing(c.id, 1, 1)})
			for _, r := range []struct{ method, path, body, call string }{
				{"GET", "/v1/tasks/" + c.segment, "", "Latest"},
				{"GET", "/v1/tasks/" + c.segment + "/versions/1", "", "Get"},
				{"POST", "/v1/tasks/" + c.segment + "/versions/1/heartbeat", `{"attempt":1}`, "Heartbeat"},
				{"POST", "/v1/tasks/" + c.segment + "/versions/1/result", `{"attempt":1,"status":"success"}`, "Report"},
				{"DELETE", "/v1/tasks/" + c.segment + "/versions/1", "", "Cancel"},
			} {
				var acc struct {
					TaskID string `json:"task_id"`
				}
				st, eb := f.call(t, r.method, r.path, f.admin, r.body, &acc)
				require.Less(t, st, 400, "%s %s: %+v", r.method, r.path, eb)
				require.Equal(t, r.call, f.svc.lastCall().method)
				require.Equal(t, c.id, f.svc.lastCall().id, "%s %s", r.method, r.path)
				require.Equal(t, c.id, acc.TaskID, "the response names the decoded id")
			}
		})
	}
}

func TestQueuesAPI(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	body := `{"push_url":"https://worker.example/tasks","secrets":["whsec_c2VjcmV0c2VjcmV0c2VjcmV0"],"allow_private":true,
		"concurrency_limit":4,"weights":[50,20,15,10,5],"pending_timeout":"1h","processing_timeout":"5m","push_timeout":"45s",
		"heartbeat_timeout":"30s","retry":{"initial_interval":"2s","backoff":1.5,"max_interval":"1m","max_attempts":7},
		"success_retention":"2h","purge_age":"72h"}`
	emails := courier.Queue{Name: "emails", PushURL: "https://worker.example/tasks", Secrets: []string{"whsec_c2VjcmV0c2VjcmV0c2VjcmV0"},
		AllowPrivate: true, ConcurrencyLimit: 4, Weights: courier.BandWeights{50, 20, 15, 10, 5}, PendingTimeout: time.Hour,
		ProcessingTimeout: 5 * time.Minute, PushTimeout: 45 * time.Second, HeartbeatTimeout: 30 * time.Second,
		Retry:            courier.RetryPolicy{MaxAttempts: 7, InitialInterval: 2 * time.Second, BackoffCoef: 1.5, MaxInterval: time.Minute},
		SuccessRetention: 2 * time.Hour, PurgeAge: 72 * time.Hour}

	f.svc.answer(answer{queue: storedQueue(emails), created: true})
	resp, _ := f.do(t, "PUT", "/v1/queues/emails", f.admin, "application/json", strings.NewReader(body))
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "whsec_c2VjcmV0c2VjcmV0c2VjcmV0", "secrets are never shown")
	var q api.Queue
	require.NoError(t, json.Unmarshal(raw, &q))
	require.Equal(t, emails, f.svc.lastPut(), "durations parsed, name from the path")
	require.Equal(t, api.Queue{Name: "emails", PushURL: "https://worker.example/tasks", SecretsCount: 1, AllowPrivate: true,
		ConcurrencyLimit: 4, Weights: courier.BandWeights{50, 20, 15, 10, 5}, PendingTimeout: api.Duration(time.Hour), ProcessingTimeout: api.Duration(5 * time.Minute),
		PushTimeout: api.Duration(45 * time.Second), HeartbeatTimeout: api.Duration(30 * time.Second),
		Retry:            api.Retry{InitialInterval: api.PositiveDuration(2 * time.Second), Backoff: 1.5, MaxInterval: api.PositiveDuration(time.Minute), MaxAttempts: 7},
		SuccessRetention: api.Duration(2 * time.Hour), PurgeAge: api.Duration(72 * time.Hour), CreatedAt: fakeNow, UpdatedAt: fakeNow,
		DispatchMode: courier.DispatchPerAttempt, PushBatchSize: 1}, q)

	f.svc.answer(answer{queue: storedQueue(emails), created: false})
	st, eb := f.call(t, "PUT", "/v1/queues/emails", f.admin, body, &q)
	require.Equal(t, http.StatusOK, st, "a PUT the service says replaced a queue: %+v", eb)

	bulk := storedQueue(courier.Queue{Name: "bulk"})
	t.Run("defaults", func(t *testing.T) {
		f.svc.answer(answer{queue: bulk, created: true})
		f.svc.answerTo("GetQueue", answer{err: courier.Errorf(courier.CodeNotFound, "queue %q not found", "bulk")})
		st, eb := f.call(t, "PUT", "/v1/queues/bulk", f.admin, `{}`, &q)
		require.Equal(t, http.StatusCreated, st, "%+v", eb)
		require.Equal(t, courier.Queue{Name: "bulk"}, f.svc.lastPut(), "omitted fields arrive unset: defaults are the service's")
		require.Equal(t, courier.DefaultBandWeights, q.Weights)
		require.Zero(t, q.HeartbeatTimeout, "heartbeats are off by default")
		require.Equal(t, 0, q.SecretsCount)
	})
	t.Run("secrets left out are kept", func(t *testing.T) {
		f.svc.answer(answer{queue: storedQueue(emails)})
		st, eb := f.call(t, "PUT", "/v1/queues/emails", f.admin, `{"concurrency_limit":8}`, &q)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.Equal(t, fakeCall{"PutQueue", "emails", 0}, f.svc.lastCall())
		require.Nil(t, f.svc.lastPut().Secrets, "left out: the store keeps the stored ones in its transaction (store suite), so a changed limit never turns signing off")
		require.Equal(t, 8, f.svc.lastPut().ConcurrencyLimit)

		st, eb = f.call(t, "PUT", "/v1/queues/emails", f.admin, `{"secrets":[]}`, &q)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.NotNil(t, f.svc.lastPut().Secrets, "[] is not left out")
		require.Empty(t, f.svc.lastPut().Secrets, "[] removes them")
	})
	f.svc.answer(answer{queue: bulk})
	t.Run("heartbeat off", func(t *testing.T) {
		for _, off := range []string{`"0s"`, `"0"`, `""`} {
			st, eb := f.call(t, "PUT", "/v1/queues/bulk", f.admin, `{"heartbeat_timeout":`+off+`}`, &q)
			require.Equal(t, http.StatusOK, st, "%s: %+v", off, eb)
			require.Zero(t, f.svc.lastPut().HeartbeatTimeout, off)
			require.Zero(t, q.HeartbeatTimeout)
		}
	})
	t.Run("weights null", func(t *testing.T) {
		st, eb := f.call(t, "PUT", "/v1/queues/bulk", f.admin, `{"weights":null}`, &q)
		require.Equal(t, http.StatusOK, st, "%+v", eb)
		require.Zero(t, f.svc.lastPut().Weights, "null weights arrive unset: the service's defaults apply")
		require.Equal(t, courier.DefaultBandWeights, q.Weights)
	})

	n := f.svc.callCount()
	for _, c := range []struct {
		name, body string
		status     int
		code       courier.Code
		field      string
	}{
		{"four weights", `{"weights":[1,2,3,4]}`, 422, courier.CodeValidation, "weights"},
		{"six weights", `{"weights":[1,2,3,4,5,6]}`, 422, courier.CodeValidation, "weights"},
		{"no weights", `{"weights":[]}`, 422, courier.CodeValidation, "weights"},
		{"bad duration", `{"pending_timeout":"soon"}`, 422, courier.CodeValidation, "pending_timeout"},
		{"negative duration", `{"processing_timeout":"-1m"}`, 422, courier.CodeValidation, "processing_timeout"},
		{"bad heartbeat", `{"heartbeat_timeout":"-1s"}`, 422, courier.CodeValidation, "heartbeat_timeout"},
		{"bad push timeout", `{"push_timeout":"forever"}`, 422, courier.CodeValidation, "push_timeout"},
		{"bad retry interval", `{"retry":{"max_interval":"later"}}`, 422, courier.CodeValidation, "retry.max_interval"},
		{"bad retention", `{"success_retention":"1 day"}`, 422, courier.CodeValidation, "success_retention"},
		{"bad purge age", `{"purge_age":"0s"}`, 422, courier.CodeValidation, "purge_age"},
		{"wrong type", `{"concurrency_limit":"4"}`, 422, courier.CodeValidation, "concurrency_limit"},
		{"unknown field", `{"colour":"red"}`, 400, courier.CodeInvalid, ""},
		{"unknown retry field", `{"retry":{"jitter":"1s"}}`, 400, courier.CodeInvalid, ""},
		{"malformed", `{"weights":[1,2`, 400, courier.CodeInvalid, ""},
		{"empty", ``, 400, courier.CodeInvalid, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, eb := f.call(t, "PUT", "/v1/queues/bulk", f.admin, c.body, nil)
			require.Equal(t, c.status, st, "%+v", eb)
			require.Equal(t, c.code, eb.Error.Code)
			if c.field != "" {
				require.Equal(t, c.field, eb.Error.Details["field"])
			}
		})
	}
	require.Equal(t, n, f.svc.callCount(), "a refused body never reaches the service")

	f.svc.answer(answer{queue: bulk})
	f.svc.answerTo("PutQueue", answer{err: invalidField("concurrency_limit", "concurrency_limit must be from 1 to 10000")})
	st, eb = f.call(t, "PUT", "/v1/queues/bulk", f.admin, `{"concurrency_limit":-1}`, nil)
	require.Equal(t, http.StatusUnprocessableEntity, st, "the service's validation passes through")
	require.Equal(t, "concurrency_limit", eb.Error.Details["field"])
	require.Equal(t, -1, f.svc.lastPut().ConcurrencyLimit, "the service, not the gateway, judges the limit")

	f.svc.answer(answer{queue: storedQueue(emails)})
	st, eb = f.call(t, "GET", "/v1/queues/emails", f.admin, "", &q)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, "emails", q.Name)
	require.Equal(t, api.Duration(30*time.Second), q.HeartbeatTimeout)
	require.Equal(t, fakeCall{"GetQueue", "emails", 0}, f.svc.lastCall())
	f.svc.answer(answer{err: courier.Errorf(courier.CodeNotFound, "queue %q not found", "nope")})
	st, eb = f.call(t, "GET", "/v1/queues/nope", f.admin, "", nil)
	require.Equal(t, http.StatusNotFound, st)
	require.Equal(t, courier.CodeNotFound, eb.Error.Code)

	var list struct {
		Queues []api.Queue `json:"items"`
	}
	f.svc.answer(answer{queues: []courier.Queue{bulk, storedQueue(emails)}})
	st, eb = f.call(t, "GET", "/v1/queues", f.admin, "", &list)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Len(t, list.Queues, 2)
	require.Equal(t, "bulk", list.Queues[0].Name)
	require.Equal(t, "emails", list.Queues[1].Name)
	require.Equal(t, 1, list.Queues[1].SecretsCount)

	for _, tok := range []string{f.producer, f.worker} {
		for _, r := range []struct{ method, path, body string }{
			{"GET", "/v1/queues", ""}, {"GET", "/v1/queues/emails", ""}, {"PUT", "/v1/queues/emails", body},
		} {
			st, eb := f.call(t, r.method, r.path, tok, r.body, nil)
			require.Equal(t, http.StatusForbidden, st, "%s %s is admin only", r.method, r.path)
			require.Equal(t, courier.CodePermissionDenied, eb.Error.Code)
		}
	}
}

// Without a TaskService the task and queue endpoints do not exist.
func TestTasksDisabled(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, p := range []string{"/v1/tasks/t-1", "/v1/queues"} {
		resp, eb := f.do(t, "GET", p, f.admin, "", nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
		require.Equal(t, courier.CodeNotFound, eb.Error.Code)
	}
}

// The stubs only switch their routes on: TestOpenAPIDocumentsRoutes never calls them.
type stubTimers struct{ gateway.TimerService }
type stubSchedules struct{ gateway.ScheduleService }
type stubBizTypes struct{ gateway.BizTypeStore }

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options", "trace"}

func jsonNames(v any) []string {
	return jsonNamesOf(reflect.TypeOf(v))
}

// jsonNamesOf names the JSON fields of a struct type, those of an embedded struct without a
// name of its own among them (encoding/json flattens it).
func jsonNamesOf(rt reflect.Type) []string {
	var out []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonNamesOf(f.Type)...)
			continue
		}
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// The document's named schemas name exactly the fields of the JSON types the gateway reads and
// writes (routes: TestOpenAPICoversEveryRoute; bodies: every test's exchanges, checked by
// newServer).
func TestOpenAPIDocumentsRoutes(t *testing.T) {
	t.Parallel()
	doc, _ := openAPISpec(t)
	for schema, v := range map[string]any{
		"TaskRequest":          api.TaskRequest{},
		"TaskOverrides":        api.TaskOverrides{},
		"Task":                 api.Task{},
		"TaskResult":           api.TaskResult{},
		"Heartbeat":            api.Heartbeat{},
		"ReportAccepted":       api.ReportAccepted{},
		"QueueRequest":         api.QueueConfig{},
		"Queue":                api.Queue{},
		"Retry":                api.Retry{},
		"TaskBulkFilter":       api.TaskBulkFilter{},
		"BulkResult":           api.BulkResult{},
		"TaskCancelResult":     api.TaskCancelResult{},
		"TaskRetryResult":      api.TaskRetryResult{},
		"RedriveResult":        api.RedriveResult{},
		"TimerRedeliverResult": api.TimerRedeliverResult{},
		"OutboxRecord":         api.OutboxRecord{},
		"BlockedKey":           api.BlockedKey{},
		"Timer":                api.Timer{},
		"TimerRequest":         api.TimerRequest{},
		"Reschedule":           api.Reschedule{},
		"BizTypeRequest":       api.BizTypeConfig{},
		"BizType":              api.BizType{},
		"ScheduleSpec":         api.ScheduleSpec{},
		"Schedule":             api.Schedule{},
		"SchedulePage":         api.SchedulePage{},
		"ScheduleNote":         api.ScheduleNote{},
		"Pause":                api.Pause{},
		"PublishRequest":       api.PublishRequest{},
		"OutboxPage":           api.OutboxPage{},
		"BlockedKeyPage":       api.BlockedKeyPage{},
		"RedriveFilter":        api.RedriveFilter{},
		"TimerPage":            api.TimerPage{},
		"TimerBatch":           api.TimerBatch{},
		"TimerBatchItem":       api.TimerBatchItem{},
		"TimerBatchResult":     api.TimerBatchResult{},
		"TimerRedeliverFilter": api.TimerRedeliverFilter{},
		"TaskPage":             api.TaskPage{},
		"TaskResults":          api.TaskResults{},
		"TaskResultItem":       api.TaskResultItem{},
		"TaskResultsAnswer":    api.TaskResultsAnswer{},
		"TaskResultAnswer":     api.TaskResultAnswer{},
		"ErrorDetail":          api.ErrorDetail{},
		"Error":                api.ErrorBody{},
		"PauseRequest":         api.PauseRequest{},
		// POST /v1/tasks/results and the pushes (the document's webhooks).
		"TaskPush":            api.TaskPush{},
		"PushAnswer":          api.PushAnswer{},
		"TaskPushBatch":       api.TaskPushBatch{},
		"TaskPushBatchAnswer": api.TaskPushBatchAnswer{},
		"TaskRefusal":         api.TaskRefusal{},
	} {
		ref := doc.Components.Schemas[schema]
		require.NotNil(t, ref, "schema %s", schema)
		props, _ := flatSchema(ref.Value)
		names := make([]string, 0, len(props))
		for name := range props {
			names = append(names, name)
		}
		require.ElementsMatch(t, jsonNames(v), names, "schema %s", schema)
	}
}

// A signing secret the signer cannot use is refused when the queue is saved,
// not discovered at the first push.
func TestUnusableSecretsRefused(t *testing.T) {
	t.Parallel()
	f := setupTasks(t)
	st, eb := f.call(t, "PUT", "/v1/queues/parse", f.admin, `{"secrets":["whsec_short"]}`, nil)
	require.Equal(t, 422, st, "%+v", eb)
	require.Equal(t, courier.CodeValidation, eb.Error.Code)
	require.Equal(t, "secrets", eb.Error.Details["field"])
}

// GET /v1/tasks reads its filters, refuses bad ones before the service, and pages with a token
// sealed to the query.
func TestListTasks(t *testing.T) {
	f := setupTasks(t)
	t1 := courier.Task{TaskID: "a", Version: 2, Queue: "parse", Priority: 1, Status: courier.TaskFailed, CreatedAt: fakeNow}
	t2 := courier.Task{TaskID: "b", Version: 1, Queue: "parse", Priority: 1, Status: courier.TaskFailed, CreatedAt: fakeNow.Add(-time.Second)}
	f.svc.answer(answer{tasks: []courier.Task{t1, t2}, more: true})
	const q = "/v1/tasks?queue=parse&status=failed&priority=1&created_after=2026-01-01T00:00:00Z&created_before=2026-04-01T00:00:00Z&limit=2"
	var page api.TaskPage
	st, eb := f.call(t, "GET", q, f.producer, "", &page)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Len(t, page.Items, 2)
	require.Equal(t, "task/a/2", page.Items[0].WorkflowID)
	require.NotEmpty(t, page.NextPageToken)
	got := f.svc.lastList()
	require.Equal(t, courier.TaskFilter{Queue: "parse", Status: courier.TaskFailed, Priority: 1, Limit: 2,
		CreatedAfter: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), CreatedBefore: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)}, got)

	// The token continues after the page's last version, for this query only.
	f.svc.answer(answer{tasks: []courier.Task{}})
	st, eb = f.call(t, "GET", q+"&page_token="+page.NextPageToken, f.producer, "", &page)
	require.Equal(t, http.StatusOK, st, "%+v", eb)
	require.Equal(t, &courier.TaskKey{CreatedAt: t2.CreatedAt, TaskID: "b", Version: 1}, f.svc.lastList().After)
	require.Empty(t, page.NextPageToken)
	calls := f.svc.callCount()
	st, eb = f.call(t, "GET", "/v1/tasks?queue=other&page_token="+page.NextPageToken+"x", f.producer, "", nil)
	require.Equal(t, http.StatusBadRequest, st)
	require.Equal(t, "page_token", eb.Error.Details["field"])

	for _, bad := range []struct{ query, field string }{
		{"status=done", "status"},
		{"priority=0", "priority"},
		{"priority=6", "priority"},
		{"created_after=yesterday", "created_after"},
		{"created_before=2026-01-01", "created_before"},
		{"limit=1001", "limit"},
		{"queue=a%2Fb", "queue"},
	} {
		st, eb := f.call(t, "GET", "/v1/tasks?"+bad.query, f.producer, "", nil)
		require.Equal(t, http.StatusBadRequest, st, bad.query)
		require.Equal(t, bad.field, eb.Error.Details["field"], bad.query)
	}
	require.Equal(t, calls, f.svc.callCount(), "refused lists never reach the service")
	st, _ = f.call(t, "GET", "/v1/tasks", f.worker, "", nil)
	require.Equal(t, http.StatusForbidden, st, "listing needs the producer scope")
}

// The slot a result frees is released only once the worker can read the 202: the release waits
// (boundedly) for the client to have the whole answer in hand, which it can only have if the
// gateway wrote and flushed it before releasing. (A plain server: the fixture's checks the
// OpenAPI document on answers it buffers whole.)
func TestResultSlotIsReleasedAfterTheAnswer(t *testing.T) {
	f := setupTasks(t)
	srv := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: f.st, Outbox: f.st, Tasks: f.svc, Gatherer: prometheus.NewRegistry()}))
	t.Cleanup(srv.Close)
	answered := make(chan struct{})
	releasedAfter := make(chan bool, 1)
	f.svc.release = func() {
		select {
		case <-answered:
			releasedAfter <- true
		case <-time.After(5 * time.Second): // the answer never reached the client: released before it
			releasedAfter <- false
		}
	}
	req, err := http.NewRequest("POST", srv.URL+"/v1/tasks/t-1/versions/1/result", strings.NewReader(`{"attempt":1,"status":"success"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+f.worker)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body) // a whole body, as most clients read it before they go on
	resp.Body.Close()
	require.NoError(t, err)
	var acc api.ReportAccepted
	require.NoError(t, json.Unmarshal(raw, &acc))
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.True(t, acc.Accepted)
	close(answered)
	require.True(t, <-releasedAfter, "the slot was released before the worker could read its answer")
}
