package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/server/temporaltest"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/testenv"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/tracing/otelsetup"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/workflows"
)

// traceExporter keeps, in tracetest's in-memory exporter, the spans of the traces a test
// watches. The tracer provider is OpenTelemetry's global (as in courier's processes), shared
// by every test of the binary: the filter keeps the other tests' spans out.
type traceExporter struct {
	mu    sync.Mutex
	watch map[trace.TraceID]bool
	mem   *tracetest.InMemoryExporter
}

func (e *traceExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	keep := spans[:0:0]
	for _, s := range spans {
		if e.watch[s.SpanContext().TraceID()] {
			keep = append(keep, s)
		}
	}
	e.mu.Unlock()
	return e.mem.ExportSpans(ctx, keep)
}

func (e *traceExporter) Shutdown(context.Context) error { return nil }

// spans returns the recorded spans of one trace.
func (e *traceExporter) spans(id trace.TraceID) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range e.mem.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

var tracedSpans = sync.OnceValue(func() *traceExporter {
	e := &traceExporter{watch: map[trace.TraceID]bool{}, mem: tracetest.NewInMemoryExporter()}
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(e)))
	otel.SetTextMapPropagator(tracing.Propagator)
	return e
})

// tracedStack is a stack whose Temporal client (and so every worker built from it) carries
// Temporal's tracing interceptor, as courier's commands set it when tracing is on.
func tracedStack(t *testing.T, dialect string) (*stack, *traceExporter) {
	exp := tracedSpans()
	ti, err := otelsetup.TemporalInterceptor()
	require.NoError(t, err)
	s := newStack(t, dialect, temporaltest.WithBaseClientOptions(client.Options{Interceptors: []interceptor.ClientInterceptor{ti}}))
	return s, exp
}

// rootSpan starts the test's own span (the producer's side) and watches its trace.
func rootSpan(t *testing.T, exp *traceExporter, name string) (context.Context, trace.Span) {
	ctx, span := tracing.Tracer().Start(t.Context(), name)
	exp.mu.Lock()
	exp.watch[span.SpanContext().TraceID()] = true
	exp.mu.Unlock()
	return ctx, span
}

// findChain returns the spans ending paths named names[0] → names[1] → …, each span a child of
// the one before; empty when there is no such path.
func findChain(spans tracetest.SpanStubs, names ...string) []tracetest.SpanStub {
	var cur []tracetest.SpanStub
	for i, name := range names {
		var next []tracetest.SpanStub
		for _, s := range spans {
			if s.Name != name {
				continue
			}
			if i == 0 {
				next = append(next, s)
				continue
			}
			for _, p := range cur {
				if s.Parent.SpanID() == p.SpanContext.SpanID() {
					next = append(next, s)
					break
				}
			}
		}
		if len(next) == 0 {
			return nil
		}
		cur = next
	}
	return cur
}

// disconnected lists the spans of a trace whose parent is not in it: in one connected trace
// only the root has none.
func disconnected(spans tracetest.SpanStubs) []string {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var out []string
	for _, s := range spans {
		if s.Parent.IsValid() && !ids[s.Parent.SpanID()] {
			out = append(out, s.Name)
		}
	}
	return out
}

func spanNames(spans tracetest.SpanStubs) string {
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// requireTrace waits until the trace holds every chain (each a path of parent → child spans)
// and is connected, and returns the last span of each chain.
func requireTrace(t *testing.T, exp *traceExporter, id trace.TraceID, chains ...[]string) []tracetest.SpanStub {
	t.Helper()
	var (
		ends  []tracetest.SpanStub
		spans tracetest.SpanStubs
	)
	ok := func() bool {
		spans = exp.spans(id)
		ends = ends[:0]
		for _, c := range chains {
			end := findChain(spans, c...)
			if len(end) == 0 {
				return false
			}
			ends = append(ends, end[0])
		}
		return len(disconnected(spans)) == 0
	}
	if !assert.Eventually(t, ok, 20*time.Second, 50*time.Millisecond) { // spans are exported as they end
		require.FailNow(t, "the trace is not one connected trace with the expected spans",
			"spans: %s\nwithout their parent: %v", spanNames(spans), disconnected(spans))
	}
	return ends
}

// tracedCall sends a JSON request carrying ctx's traceparent, as an instrumented client does.
func tracedCall(t *testing.T, ctx context.Context, method, url, token string, body any) (int, []byte) {
	t.Helper()
	status, raw, err := tracedDo(ctx, method, url, token, body)
	require.NoError(t, err)
	return status, raw
}

// tracedDo is tracedCall for goroutines other than the test's: it returns its error.
func tracedDo(ctx context.Context, method, url, token string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	tracing.InjectHTTP(ctx, req.Header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// TestTraceOutboxProducerToPublish: a producer writes an outbox row with outbox.Enqueue inside
// its own span; the relay's span, the delivery workflow, its activity and the publish are one
// connected trace under it, and the published message carries the publish span's traceparent.
func TestTraceOutboxProducerToPublish(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			s, exp := tracedStack(t, d)
			s.createStream("TRACED", "traced.>")
			s.startWorker(false)

			ctx, root := rootSpan(t, exp, "producer tx")
			err := s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := outbox.Enqueue(ctx, tx, outbox.Message{Topic: "traced.created", Key: "k-1", Payload: []byte(`{"n":1}`),
					Headers: map[string]string{"x-app": "test"}})
				return err
			})
			require.NoError(t, err)
			root.End()
			traceID := root.SpanContext().TraceID()

			// The row carries the producer's trace context in its headers.
			recs, _, err := s.store.ListOutbox(ctx, courier.OutboxFilter{Limit: 10})
			require.NoError(t, err)
			require.Len(t, recs, 1)
			require.Equal(t, tracing.FromContext(ctx).Parent, recs[0].Headers[courier.HeaderTraceParent])
			require.Equal(t, "test", recs[0].Headers["x-app"])

			msg := s.waitMessage("TRACED")
			ends := requireTrace(t, exp, traceID, []string{"producer tx", "outbox relay",
				"StartWorkflow:" + courier.KindOutbox.Workflow, "RunWorkflow:" + courier.KindOutbox.Workflow,
				"StartActivity:" + contract.DeliverOutboxName, "RunActivity:" + contract.DeliverOutboxName,
				"publish traced.created"})
			publish := ends[0]
			got := tracing.SpanContext(courier.TraceContext{Parent: msg.Headers().Get(courier.HeaderTraceParent)})
			require.True(t, got.IsValid(), "the message has no traceparent: %v", msg.Headers())
			require.Equal(t, traceID, got.TraceID())
			require.Equal(t, publish.SpanContext.SpanID(), got.SpanID(), "the message continues from the publish span")
			require.Equal(t, "test", msg.Headers().Get("x-app"), "the producer's headers are published")
			requireDocumentedTrace(t, exp, traceID, "outbox", strings.NewReplacer("traced.created", "<topic>"))
		})
	}
}

// waitMessage returns the first message of a stream, waiting for it.
func (s *stack) waitMessage(stream string) jetstream.Msg {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.t.Context(), 30*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, stream)
	require.NoError(s.t, err)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(s.t, err)
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	require.NoError(s.t, err)
	return msg
}

// TestTraceTimerCreateToCallback: a timer created through the gateway with a traceparent fires
// within the same trace: the gateway's span, the timer's workflow, the claim of its row, its
// delivery activity and the callback request are connected, and the callback carries the callback span's
// traceparent while its signature still verifies.
func TestTraceTimerCreateToCallback(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			s, exp := tracedStack(t, d)
			secret, err := webhook.GenerateSecret()
			require.NoError(t, err)
			verifier, err := webhook.NewVerifier(secret)
			require.NoError(t, err)
			type callback struct {
				traceparent string
				verified    error
			}
			got := make(chan callback, 10)
			rcvURL := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				got <- callback{traceparent: r.Header.Get(courier.HeaderTraceParent), verified: verifier.Verify(body, r.Header)}
			}))
			_, _, err = s.store.PutBizType(t.Context(), courier.BizType{Name: "order.close", Delivery: courier.DeliveryHTTP,
				CallbackURL: rcvURL, Secrets: []string{secret}})
			require.NoError(t, err)
			s.timerWorker(false)
			_, token, err := s.store.CreateAPIKey(t.Context(), "orders", []apikey.Scope{apikey.ScopeProducer})
			require.NoError(t, err)
			gw := startHTTP(t, gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store,
				Timers: s.timerService(), Logger: quiet}))

			ctx, root := rootSpan(t, exp, "client create timer")
			status, raw := tracedCall(t, ctx, http.MethodPost, gw+"/v1/timers", token,
				map[string]any{"biz_type": "order.close", "biz_id": "o-1", "delay": "1s"})
			require.Equal(t, http.StatusCreated, status, string(raw))
			root.End()
			traceID := root.SpanContext().TraceID()

			var cb callback
			select {
			case cb = <-got:
			case <-time.After(30 * time.Second):
				t.Fatal("the timer never called back")
			}
			require.NoError(t, cb.verified, "the signature verifies with the traceparent header added")
			ends := requireTrace(t, exp, traceID, []string{"client create timer", "POST /v1/timers",
				"StartWorkflow:" + courier.KindTimer.Workflow, "RunWorkflow:" + courier.KindTimer.Workflow,
				"StartActivity:" + contract.DeliverTimerName, "RunActivity:" + contract.DeliverTimerName,
				"callback POST"}, []string{"RunWorkflow:" + courier.KindTimer.Workflow,
				"StartActivity:" + contract.ClaimTimerRunName, "RunActivity:" + contract.ClaimTimerRunName})
			sc := tracing.SpanContext(courier.TraceContext{Parent: cb.traceparent})
			require.True(t, sc.IsValid(), "the callback has no traceparent")
			require.Equal(t, traceID, sc.TraceID())
			require.Equal(t, ends[0].SpanContext.SpanID(), sc.SpanID(), "the callback continues from its span")
			requireDocumentedTrace(t, exp, traceID, "timer", strings.NewReplacer())
		})
	}
}

// TestTraceTaskInsertToResult: a task inserted through the gateway with a traceparent is one
// trace to its result: the insert's span, the claimer's span, the attempt's workflow, the push
// (which carries its traceparent), the worker's own span, and the worker's heartbeat and result
// calls, which the gateway continues from the worker's traceparent. The result call, which
// records the success, links to the insert's span; the attempt's run then ends without a
// finish. The push is a local activity on a queue without a heartbeat timeout (on SQLite and
// PostgreSQL), the push-and-wait activity on one with.
func TestTraceTaskInsertToResult(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) { testTraceTaskInsertToResult(t, d, 0, courier.DispatchPerAttempt) })
	}
	t.Run("heartbeat timeout", func(t *testing.T) {
		testTraceTaskInsertToResult(t, testenv.Dialects[0], 30*time.Second, courier.DispatchPerAttempt)
	})
	// In the batched mode the task's trace has no run of its own: its push's span, in the
	// task's trace, carries the request the worker continues.
	for _, d := range testenv.Dialects {
		t.Run("batched/"+d, func(t *testing.T) { testTraceTaskInsertToResult(t, d, 0, courier.DispatchBatched) })
	}
}

// A batched push (push_batch_size above 1) is one request for many tasks, traced in its batch
// run's trace; each task's push in it carries that task's own trace context, so a worker that
// continues it (as taskworker does) works and reports each task inside the task's own trace:
// from the insert through the push to the result, with no span of the batch's in between.
func TestTraceBatchedPushKeepsEachTasksTrace(t *testing.T) {
	s, exp := tracedStack(t, testenv.Dialects[0])
	ts := taskStackOn(t, s, 5*time.Second, nil)
	ts.mode = courier.DispatchBatched

	var (
		wg       sync.WaitGroup
		requests atomic.Int32
	)
	t.Cleanup(wg.Wait)
	results := make(chan int, 10)
	worker := startHTTP(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var b api.TaskPushBatch
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		requests.Add(1)
		for _, p := range b.Tasks {
			parent := tracing.ContextWith(context.Background(), courier.TraceContext{Parent: p.Traceparent, State: p.Tracestate})
			ctx, span := tracing.Tracer().Start(parent, "worker processes task")
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer span.End()
				res, _, _ := tracedDo(ctx, http.MethodPost, p.ResultURL, ts.worker,
					map[string]any{"attempt": p.Attempt, "status": "success"})
				results <- res
			}()
		}
		rw.WriteHeader(http.StatusAccepted)
	}))
	ts.putQueue("traced", map[string]any{"push_url": worker, "concurrency_limit": 10, "push_batch_size": 10})

	var ids []trace.TraceID
	for _, id := range []string{"doc-1", "doc-2"} {
		ctx, root := rootSpan(t, exp, "client insert task")
		status, raw := tracedCall(t, ctx, http.MethodPost, ts.gw+"/v1/tasks", ts.producer,
			map[string]any{"task_id": id, "task_version": 1, "queue": "traced", "payload": map[string]any{"file": id}})
		require.Equal(t, http.StatusCreated, status, string(raw))
		root.End()
		ids = append(ids, root.SpanContext().TraceID())
	}
	for range ids {
		select {
		case code := <-results:
			require.Equal(t, http.StatusAccepted, code)
		case <-time.After(30 * time.Second):
			t.Fatal("a task was never pushed")
		}
	}
	ts.waitStatus("doc-1", 1, courier.TaskSuccess, 20*time.Second)
	ts.waitStatus("doc-2", 1, courier.TaskSuccess, 20*time.Second)
	require.NotZero(t, requests.Load())
	for _, id := range ids {
		requireTrace(t, exp, id, []string{"client insert task", "POST /v1/tasks", "task push",
			"worker processes task", "POST /v1/tasks/:task_id/versions/:version/result"})
		requireDocumentedTrace(t, exp, id, "batched task, pushed with others", strings.NewReplacer())
	}
}

func testTraceTaskInsertToResult(t *testing.T, d string, heartbeat time.Duration, mode courier.DispatchMode) {
	s, exp := tracedStack(t, d)
	ts := taskStackOn(t, s, 5*time.Second, nil)
	ts.mode = mode

	// The task worker continues the push's trace in its own span and reports within it.
	type pushed struct{ traceparent, heartbeat, result int }
	done := make(chan pushed, 10)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	worker := startHTTP(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		ctx, span := tracing.Tracer().Start(tracing.ExtractHTTP(context.Background(), r.Header), "worker processes task")
		hasParent := 0
		if trace.SpanContextFromContext(tracing.ExtractHTTP(context.Background(), r.Header)).IsValid() {
			hasParent = 1
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer span.End()
			hb, _, _ := tracedDo(ctx, http.MethodPost, p.HeartbeatURL, ts.worker, map[string]any{"attempt": p.Attempt})
			res, _, _ := tracedDo(ctx, http.MethodPost, p.ResultURL, ts.worker,
				map[string]any{"attempt": p.Attempt, "status": "success", "result": map[string]any{"ok": true}})
			done <- pushed{traceparent: hasParent, heartbeat: hb, result: res}
		}()
		rw.WriteHeader(http.StatusAccepted)
	}))
	queue := map[string]any{"push_url": worker, "concurrency_limit": 2}
	if heartbeat > 0 {
		queue["heartbeat_timeout"] = heartbeat.String()
	}
	ts.putQueue("traced", queue)

	ctx, root := rootSpan(t, exp, "client insert task")
	status, raw := tracedCall(t, ctx, http.MethodPost, ts.gw+"/v1/tasks", ts.producer,
		map[string]any{"task_id": "doc-1", "task_version": 1, "queue": "traced", "payload": map[string]any{"file": "a.pdf"}})
	require.Equal(t, http.StatusCreated, status, string(raw))
	root.End()
	traceID := root.SpanContext().TraceID()

	var p pushed
	select {
	case p = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the task was never pushed")
	}
	require.Equal(t, 1, p.traceparent, "the push carries a traceparent")
	require.Equal(t, http.StatusOK, p.heartbeat)
	require.Equal(t, http.StatusAccepted, p.result)
	ts.waitStatus("doc-1", 1, courier.TaskSuccess, 20*time.Second)

	if mode == courier.DispatchBatched {
		push := []string{"client insert task", "POST /v1/tasks", "task push", "callback POST", "worker processes task"}
		ends := requireTrace(t, exp, traceID,
			append(append([]string(nil), push...), "POST /v1/tasks/:task_id/versions/:version/result"),
			append(append([]string(nil), push...), "POST /v1/tasks/:task_id/versions/:version/heartbeat"),
			push[:2])
		result, insert := ends[0], ends[2]
		require.Len(t, result.Links, 1, "the result call that recorded the success links to the task's insert")
		require.Equal(t, insert.SpanContext.SpanID(), result.Links[0].SpanContext.SpanID())
		requireDocumentedTrace(t, exp, traceID, "batched task", strings.NewReplacer())
		return
	}
	attempt := []string{"client insert task", "POST /v1/tasks", "task claim",
		"StartWorkflow:" + courier.KindTask.Workflow, "RunWorkflow:" + courier.KindTask.Workflow}
	pushName := contract.SendPushName // a local activity, traced as one
	if heartbeat > 0 {
		pushName = contract.PushAwaitName
	}
	push := append(append([]string(nil), attempt...), "StartActivity:"+pushName, "RunActivity:"+pushName,
		"callback POST", "worker processes task")
	chains := [][]string{
		append(append([]string(nil), push...), "POST /v1/tasks/:task_id/versions/:version/result"),
		append(append([]string(nil), push...), "POST /v1/tasks/:task_id/versions/:version/heartbeat"),
		attempt[:2],
	}
	ends := requireTrace(t, exp, traceID, chains...)
	result, insert := ends[0], ends[2]
	require.Len(t, result.Links, 1, "the result call that recorded the success links to the task's insert")
	require.Equal(t, insert.SpanContext.SpanID(), result.Links[0].SpanContext.SpanID())
	require.Equal(t, traceID, result.Links[0].SpanContext.TraceID())
	// The run has closed by now (the spans of its end are exported): no finish in it.
	var res workflows.TaskRunResult
	require.NoError(t, ts.tc.GetWorkflow(t.Context(), courier.TaskWorkflowID("doc-1", 1), "").Get(t.Context(), &res))
	finishChain := append(append([]string(nil), attempt...), "StartActivity:"+contract.FinishTaskName, "RunActivity:"+contract.FinishTaskName)
	require.Empty(t, findChain(exp.spans(traceID), finishChain...), "a recorded success has no finish")
	for _, a := range result.Attributes {
		if a.Key == "courier.task_id" {
			require.Equal(t, "doc-1", a.Value.AsString())
		}
	}
	block := "task"
	if heartbeat > 0 {
		block = "task with a heartbeat timeout"
	}
	requireDocumentedTrace(t, exp, traceID, block, strings.NewReplacer())
}
