package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/worker"
	"github.com/courier-oss/courier/workflows"
)

// opsStack holds one scenario of each kind of work that needs an operator: a dead outbox record
// (topic orders.created has no stream), a dead ordered record blocking its key (orders.> is
// ordered; key o-43), a failed task (queue docparse allows one attempt and the worker fails
// it), a failed timer (order.close's callback answers 410) and a scheduled one due in half an
// hour; and, beside them, work that succeeded: a sent record (shipments.created has a stream)
// and a successful task (queue thumbs).
type opsStack struct {
	*taskStack
	sentID      int64
	deadID      int64
	deadKeyedID int64
	blockedKey  string // the key's delivery workflow
	timers      *timers.Service
	failedTimer string
	soonTimer   string
}

func newOpsStack(t *testing.T) *opsStack {
	ctx := t.Context()
	ts := &taskStack{stack: newStack(t, "sqlite")}
	// The gateway's address goes into every push, so it listens before the worker starts.
	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { h.ServeHTTP(rw, r) }))
	t.Cleanup(srv.Close)
	ts.gw = srv.URL
	// One worker that does everything: relays the outbox, delivers timers, claims tasks.
	cw, err := worker.New(worker.Config{
		Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry,
			Ordered: relay.OrderedConfig{Topics: []string{"orders.>"}}},
		Namespace:              ts.ts.GetDefaultNamespace(),
		AllowLoopbackCallbacks: true,
		BizTypeRefresh:         100 * time.Millisecond,
		ShutdownTimeout:        2 * time.Second,
		Tasks: tasks.Config{
			PollInterval: 200 * time.Millisecond,
			RecoverAfter: 5 * time.Second,
			PublicURL:    ts.gw,
			SweepEvery:   time.Hour,
		},
	}, worker.Deps{Temporal: ts.tc, Publisher: ts.pub, Logger: quiet, Tasks: ts.store, BizTypes: ts.store, TimerRows: ts.store,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: ts.store}}})
	require.NoError(t, err)
	require.NoError(t, cw.Start(ctx))
	t.Cleanup(cw.Stop)
	ts.w = cw
	ts.svc = tasks.NewService(ts.store, ts.tc, ts.ts.GetDefaultNamespace(), cw.WakeTasks, nil, quiet)
	h = gateway.New(gateway.Config{}, gateway.Deps{Keys: ts.store, Outbox: ts.store, Tasks: ts.svc, Logger: quiet})
	for _, k := range []struct {
		dst   *string
		scope apikey.Scope
	}{{&ts.admin, apikey.ScopeAdmin}, {&ts.producer, apikey.ScopeProducer}, {&ts.worker, apikey.ScopeWorker}} {
		_, token, err := ts.store.CreateAPIKey(ctx, "ops-"+string(k.scope), []apikey.Scope{k.scope})
		require.NoError(t, err)
		*k.dst = token
	}
	w := startTaskWorker(t, func(_ *taskWorker, p api.TaskPush) {
		report(t, ts.worker, p, "failure", 422, "unparseable pdf")
	})
	ts.putQueue("docparse", map[string]any{"push_url": w.url, "retry": map[string]any{"max_attempts": 1}})
	require.Equal(t, http.StatusCreated, ts.insert("doc-42", 1, 2, "docparse"))
	ok := startTaskWorker(t, func(_ *taskWorker, p api.TaskPush) {
		report(t, ts.worker, p, "success", 200, "thumbnail made")
	})
	ts.putQueue("thumbs", map[string]any{"push_url": ok.url})
	require.Equal(t, http.StatusCreated, ts.insert("thumb-7", 1, 2, "thumbs"))
	ts.createStream("SHIPMENTS", "shipments.>")

	var ids []int64
	require.NoError(t, ts.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`{"order":"o-42"}`)},
			outbox.Message{Topic: "orders.created", Key: "o-43", Payload: []byte(`{"order":"o-43"}`)},
			outbox.Message{Topic: "shipments.created", Payload: []byte(`{"order":"o-40"}`)})
		return err
	}))

	gone := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	_, _, err = ts.store.PutBizType(ctx, courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP, CallbackURL: gone,
		Secrets: []string{"whsec_" + strings.Repeat("A", 32)}})
	require.NoError(t, err)
	svc := ts.timerService()
	_, _, err = svc.Create(ctx, api.TimerRequest{BizType: "order.close", BizID: "o-41", When: api.At(time.Now().Add(500 * time.Millisecond))})
	require.NoError(t, err)
	_, _, err = svc.Create(ctx, api.TimerRequest{BizType: "order.close", BizID: "o-42", When: api.At(time.Now().Add(30 * time.Minute))})
	require.NoError(t, err)
	return &opsStack{taskStack: ts, sentID: ids[2], deadID: ids[0], deadKeyedID: ids[1], blockedKey: courier.OutboxKeyWorkflowID("", "o-43"), timers: svc,
		failedTimer: courier.TimerWorkflowID("order.close", "o-41"), soonTimer: courier.TimerWorkflowID("order.close", "o-42")}
}

// failedWith waits for the workflow's latest run to close and requires it Failed with an
// application error of the type, whose message is returned.
func (s *opsStack) failedWith(id, errType string) string {
	t := s.t
	t.Helper()
	ctx := s.t.Context()
	require.Eventually(t, func() bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, time.Minute, 50*time.Millisecond, id)
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, d.GetWorkflowExecutionInfo().GetStatus(), id)
	err = s.tc.GetWorkflow(ctx, id, "").Get(ctx, nil)
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app, id)
	require.Equal(t, errType, app.Type())
	return app.Message()
}

// A dead record's, a failed task's and a failed timer's workflows end Failed with the reason as
// the failure message, and the API still reports each as it did.
func TestFailedWorkToFailedWorkflows(t *testing.T) {
	s := newOpsStack(t)
	ctx := t.Context()

	// The dead record: its row is dead with the error the run failed with.
	msg := s.failedWith(courier.OutboxWorkflowID(courier.DefaultSource, s.deadID), workflows.ErrTypeOutboxDead)
	var rec api.OutboxRecord
	require.Equal(t, http.StatusOK, s.call(http.MethodGet, fmt.Sprintf("/v1/outbox/%d", s.deadID), s.producer, nil, &rec))
	require.Equal(t, courier.OutboxDead, rec.Status)
	require.NotEmpty(t, rec.LastError)
	require.Equal(t, rec.LastError, msg)
	require.Contains(t, msg, "orders.created")
	require.Equal(t, `"dead"`, s.stateOf(courier.OutboxWorkflowID(courier.DefaultSource, s.deadID)), "a dead record's run says so")

	// The dead ordered record: its key's run failed naming it, with its error, and shows it as
	// a dead record of its topic; the API names that run as the record's.
	msg = s.failedWith(s.blockedKey, workflows.ErrTypeOutboxKeyBlocked)
	require.Equal(t, http.StatusOK, s.call(http.MethodGet, fmt.Sprintf("/v1/outbox/%d", s.deadKeyedID), s.producer, nil, &rec))
	require.Equal(t, courier.OutboxDead, rec.Status)
	require.Equal(t, fmt.Sprintf("outbox record %d is dead and blocks its key: %s", s.deadKeyedID, rec.LastError), msg)
	require.Equal(t, s.blockedKey, rec.WorkflowID)
	d, err := s.tc.DescribeWorkflowExecution(ctx, s.blockedKey, "")
	require.NoError(t, err)
	sas := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()
	for name, want := range map[string]string{courier.SAKind: `"outbox-key"`, courier.SAState: `"dead"`,
		courier.SATopic: `"orders.created"`, courier.SARecord: strconv.FormatInt(s.deadKeyedID, 10)} {
		require.Equal(t, want, string(sas[name].GetData()), name)
	}

	// The failed task: failed in the API with the worker's message, which the run failed with.
	task := s.waitStatus("doc-42", 1, courier.TaskFailed, time.Minute)
	require.Equal(t, "unparseable pdf", task.Message)
	require.Equal(t, "unparseable pdf", s.failedWith(courier.TaskWorkflowID("doc-42", 1), workflows.ErrTypeTaskFailed))
	require.Equal(t, `"failed"`, s.stateOf(courier.TaskWorkflowID("doc-42", 1)), "a failed task's run says so")

	// The work that succeeded: Completed without a state, no upsert in its history.
	s.completedWithoutState(courier.OutboxWorkflowID(courier.DefaultSource, s.sentID))
	s.completedWithoutState(courier.TaskWorkflowID("thumb-7", 1))

	// The failed timer: Get reads the state from the failed run, the list finds it as failed.
	msg = s.failedWith(s.failedTimer, workflows.ErrTypeTimerFailed)
	require.Contains(t, msg, "410")
	tm, err := s.timers.Get(ctx, "order.close", "o-41")
	require.NoError(t, err)
	require.Equal(t, courier.TimerFailed, tm.State)
	require.Equal(t, msg, tm.LastError)
	require.False(t, tm.FireAt.IsZero())
	code, got, _ := s.timerAPI(s.timers).timer(http.MethodGet, "/v1/timers/order.close/o-41", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, courier.TimerFailed, got.State)
	require.Equal(t, msg, got.LastError)
	code, _, eb := s.timerAPI(s.timers).timer(http.MethodDelete, "/v1/timers/order.close/o-41", nil)
	require.Equal(t, http.StatusConflict, code, "a failed timer cannot be cancelled")
	require.Equal(t, string(courier.TimerFailed), eb.Error.Details["state"])
	require.Eventually(t, func() bool {
		list, _, err := s.timers.List(ctx, timers.ListQuery{BizType: "order.close", State: courier.TimerFailed, PageSize: 10}, nil)
		return err == nil && len(list) == 1 && list[0].BizID == "o-41"
	}, 10*time.Second, 100*time.Millisecond)

	// The scheduled timer is untouched and still answers.
	tm, err = s.timers.Get(ctx, "order.close", "o-42")
	require.NoError(t, err)
	require.Equal(t, courier.TimerScheduled, tm.State)
}

// Every query docs/operations.md offers parses and finds the workflows it promises.
func TestOperationsQueries(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	require.NoError(t, err)
	var queries []string
	for _, m := range regexp.MustCompile("(?s)```visibility\n(.*?)\n```").FindAllStringSubmatch(string(raw), -1) {
		queries = append(queries, strings.TrimSpace(m[1]))
	}
	s := newOpsStack(t)
	dead := courier.OutboxWorkflowID(courier.DefaultSource, s.deadID)
	failedTask := courier.TaskWorkflowID("doc-42", 1)
	s.failedWith(dead, workflows.ErrTypeOutboxDead)
	s.failedWith(s.blockedKey, workflows.ErrTypeOutboxKeyBlocked)
	s.failedWith(failedTask, workflows.ErrTypeTaskFailed)
	s.failedWith(s.failedTimer, workflows.ErrTypeTimerFailed)
	sent := courier.OutboxWorkflowID(courier.DefaultSource, s.sentID)
	okTask := courier.TaskWorkflowID("thumb-7", 1)
	for _, id := range []string{sent, okTask} {
		s.completedWithoutState(id)
	}

	// What each documented query must find, in the order of the document, and what it must not;
	// the example instants of "timers firing in the next hour" become now and now + 1 h.
	want := [][]string{
		{dead, s.blockedKey},
		{failedTask},
		{failedTask},
		{s.soonTimer},
		{s.failedTimer},
		{sent, okTask},
		{dead, s.blockedKey, failedTask, s.failedTimer},
	}
	notWant := [][]string{
		{sent},
		{okTask},
		{okTask},
		{s.failedTimer},
		{s.soonTimer},
		{dead, s.blockedKey, failedTask, s.failedTimer},
		{sent, okTask, s.soonTimer},
	}
	require.Len(t, queries, len(want), "docs/operations.md has another number of queries; keep this test in step")
	now := time.Now().UTC()
	for i, q := range queries {
		q = strings.NewReplacer("2026-11-22T10:00:00Z", now.Format(time.RFC3339),
			"2026-11-22T11:00:00Z", now.Add(time.Hour).Format(time.RFC3339)).Replace(q)
		var found map[string]bool
		var refused error
		require.Eventually(t, func() bool {
			found = map[string]bool{}
			resp, err := s.tc.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
				Namespace: s.ts.GetDefaultNamespace(), PageSize: 100, Query: q})
			var inv *serviceerror.InvalidArgument
			if errors.As(err, &inv) {
				refused = err
				return true
			}
			if err != nil {
				return false
			}
			for _, e := range resp.GetExecutions() {
				found[e.GetExecution().GetWorkflowId()] = true
			}
			for _, id := range want[i] {
				if !found[id] {
					return false
				}
			}
			return true
		}, 15*time.Second, 100*time.Millisecond, "query %d: %s must find %v", i+1, q, want[i])
		require.NoError(t, refused, "query %d does not parse: %s", i+1, q)
		for _, id := range notWant[i] {
			require.False(t, found[id], "query %d: %s must not find %s", i+1, q, id)
		}
	}
}

// stateOf is the CourierState of the workflow's latest run, as its JSON payload ("" if none),
// and requires one upsert of it in the run's history: the final state, written once.
func (s *opsStack) stateOf(id string) string {
	t := s.t
	t.Helper()
	d, err := s.tc.DescribeWorkflowExecution(t.Context(), id, "")
	require.NoError(t, err)
	upserts := 0
	for _, ev := range history(t, s.stack, id, "").GetEvents() {
		if a := ev.GetUpsertWorkflowSearchAttributesEventAttributes(); a != nil {
			_, ok := a.GetSearchAttributes().GetIndexedFields()[courier.SAState]
			require.True(t, ok, "%s: an upsert of its state", id)
			upserts++
		}
	}
	require.Equal(t, 1, upserts, "%s: its final state, written once", id)
	return string(d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[courier.SAState].GetData())
}

// completedWithoutState waits for the workflow's latest run to close and requires it Completed
// without a CourierState: how a sent record's delivery and a successful task attempt end, so
// that a success costs no upsert (docs/operations.md, CourierState).
func (s *opsStack) completedWithoutState(id string) {
	t := s.t
	t.Helper()
	ctx := t.Context()
	require.Eventually(t, func() bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, time.Minute, 50*time.Millisecond, id)
	d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.GetWorkflowExecutionInfo().GetStatus(), id)
	_, has := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[courier.SAState]
	require.False(t, has, "%s: a success writes no CourierState", id)
	upserts := 0
	for _, ev := range history(t, s.stack, id, "").GetEvents() {
		if ev.GetEventType() == enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES {
			upserts++
		}
	}
	require.Zero(t, upserts, "%s: no upsert in a success's history", id)
}
