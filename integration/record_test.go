package integration

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/outbox"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/worker"
	"github.com/courier-oss/courier/workflows"
)

// flakyPublisher fails the first failures publishes of every message, or all of them when
// failures < 0, with a transient error.
type flakyPublisher struct {
	mq.Publisher
	failures int
	mu       sync.Mutex
	seen     map[string]int
}

func (f *flakyPublisher) Publish(ctx context.Context, m mq.Message) error {
	f.mu.Lock()
	f.seen[m.ID]++
	n := f.seen[m.ID]
	f.mu.Unlock()
	if f.failures < 0 || n <= f.failures {
		return errors.New("broker unavailable (injected)")
	}
	return f.Publisher.Publish(ctx, m)
}

// TestRecordHistories records outbox delivery workflow histories from real runs on a real server
// (make record-histories), each case only where its history is missing (writeNew: to record
// one again, delete it). It runs only with COURIER_RECORD_HISTORIES=1. The cases: sent at the
// first, local attempt; sent after failed attempts (the local one, the first backoff on a
// timer, the rest of the budget in the activity); dead at once for a topic without a stream;
// dead after the budget. It also writes broken/outbox-delivery-renamed-activity.json:
// retried-then-sent.json with its delivery activity renamed, which must fail replay.
func TestRecordHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories")
	cases := []struct {
		name     string
		topic    string
		failures int
	}{
		{"sent", "orders.created", 0},
		{"sent-final-state", "orders.created", 0}, // "sent" was recorded before FinalState and is kept
		// Recorded from runs started as the relay starts them with QuietSuccess (no state at the
		// start, none written for a sent record, "dead" for a dead one); the cases above were
		// recorded before it and are kept.
		{"sent-quiet-success", "orders.created", 0},
		{"dead-unknown-topic-quiet-success", "nowhere.created", 0},
		{"retried-then-sent", "orders.created", 2},
		{"dead-unknown-topic", "nowhere.created", 0},
		{"dead-after-budget", "orders.created", -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, "sqlite")
			s.createStream("ORDERS", "orders.>")
			pub := &flakyPublisher{Publisher: s.pub, failures: c.failures, seen: map[string]int{}}
			w, err := worker.New(worker.Config{Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry}}, worker.Deps{
				Temporal: s.tc, Publisher: pub, Logger: quiet,
				Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
			})
			require.NoError(t, err)
			require.NoError(t, w.Start(context.Background()))
			defer w.Stop()
			ctx := context.Background()
			var ids []int64
			require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: c.topic, Payload: []byte(`{"recorded":true}`)})
				return err
			}))
			wid := courier.OutboxWorkflowID("", ids[0])
			require.Eventually(t, func() bool {
				d, err := s.tc.DescribeWorkflowExecution(ctx, wid, "")
				return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			}, time.Minute, 50*time.Millisecond)
			hist := history(t, s, wid, "")
			writeNew(t, filepath.Join(dir, courier.KindOutbox.Workflow, c.name+".json"), hist)

			if c.name == "retried-then-sent" {
				// A deliberately incompatible history: the recorded run scheduled an activity the
				// current code never schedules. Replay must reject it.
				renamed := false
				for _, ev := range hist.Events {
					if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
						a.ActivityType.Name, renamed = "outbox-deliver-v0", true
					}
				}
				require.True(t, renamed, "the retries ran in the delivery activity")
				writeNew(t, filepath.Join(dir, "broken", "outbox-delivery-renamed-activity.json"), hist)
			}
		})
	}
}

// writeNew writes a history only where none was recorded: a recorded history is what runs of
// its time look like, and replaying it is the point. A change to a shipped workflow (behind
// workflow.GetVersion) records its new cases under new names beside the old ones.
func writeNew(t *testing.T, path string, hist *historypb.History) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Logf("kept %s", path)
		return
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	t.Logf("recorded %s (%d events)", path, len(hist.Events))
	require.False(t, strings.Contains(string(b), "TODO"))
}

// TestRecordTimerHistories records timer workflow histories (make record-histories): delivered,
// rescheduled, cancelled, a failed delivery, and a run a schedule started. Its timers are armed
// without rows (the workflow type timer, as every timer was before rows were kept).
func TestRecordTimerHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	s := newStack(t, "sqlite")
	s.bizType("rec.ok", 0)
	_, secret := s.callbacks()
	gone := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	ctx := context.Background()
	_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "rec.gone", Delivery: courier.DeliveryHTTP, CallbackURL: gone, Secrets: []string{secret}})
	require.NoError(t, err)
	s.timerWorker(false)
	svc := s.rowlessTimerService()
	soon := func() time.Time { return time.Now().Add(1500 * time.Millisecond) }
	mk := func(typ, id string) {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: typ, BizID: id, When: api.At(soon()), Payload: json.RawMessage(`{"rec":1}`)})
		require.NoError(t, err)
	}
	mk("rec.ok", "delivered")
	mk("rec.ok", "rescheduled")
	_, err = svc.Reschedule(ctx, "rec.ok", "rescheduled", time.Now().Add(2*time.Second))
	require.NoError(t, err)
	mk("rec.ok", "cancelled")
	_, err = svc.Cancel(ctx, "rec.ok", "cancelled")
	require.NoError(t, err)
	mk("rec.gone", "failed")
	_, err = svc.CreateSchedule(ctx, "rec-schedule", api.ScheduleSpec{BizType: "rec.ok", Interval: api.PositiveDuration(time.Hour), Paused: true})
	require.NoError(t, err)
	require.NoError(t, svc.TriggerSchedule(ctx, "rec-schedule"))

	closed := func(id string) bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories", courier.KindRowlessTimer.Workflow)
	// Each case is written only where it is missing (writeNew). A failed delivery's run fails.
	for _, c := range []string{"delivered", "rescheduled", "cancelled", "failed"} {
		typ, file := "rec.ok", c
		if c == "failed" {
			typ, file = "rec.gone", "delivery-failed"
		}
		id := courier.TimerWorkflowID(typ, c)
		require.Eventually(t, func() bool { return closed(id) }, time.Minute, 50*time.Millisecond, id)
		writeNew(t, filepath.Join(dir, file+".json"), history(t, s, id, ""))
	}
	var runID, wfID string
	require.Eventually(t, func() bool {
		d, err := svc.GetSchedule(ctx, "rec-schedule")
		if err != nil || d.Runs == 0 {
			return false
		}
		desc, err := s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID("rec-schedule")).Describe(ctx)
		if err != nil || len(desc.Info.RecentActions) == 0 {
			return false
		}
		wfID = desc.Info.RecentActions[0].StartWorkflowResult.WorkflowID
		runID = desc.Info.RecentActions[0].StartWorkflowResult.FirstExecutionRunID
		return closed(wfID)
	}, time.Minute, 100*time.Millisecond)
	writeNew(t, filepath.Join(dir, "schedule-run.json"), history(t, s, wfID, runID))
}

// TestRecordTimerContinuedHistories records a timer that continued as new (make
// record-histories): the server's update limit is lowered so a run hands over after ten
// reschedules. It writes the run that handed over and the run that was then cancelled, each
// only where it is missing.
func TestRecordTimerContinuedHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	s := newStack(t, "sqlite", lowUpdateLimits())
	s.bizType("rec.ok", 0)
	s.timerWorker(false)
	svc := s.rowlessTimerService()
	ctx := context.Background()
	_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "rec.ok", BizID: "continued", When: api.At(time.Now().Add(time.Hour)), Payload: json.RawMessage(`{"rec":1}`)})
	require.NoError(t, err)
	for i := 1; i <= 12; i++ {
		_, err := svc.Reschedule(ctx, "rec.ok", "continued", time.Now().Add(time.Hour+time.Duration(i)*time.Second))
		require.NoError(t, err)
	}
	_, err = svc.Cancel(ctx, "rec.ok", "continued")
	require.NoError(t, err)

	id := courier.TimerWorkflowID("rec.ok", "continued")
	var first string
	require.Eventually(t, func() bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		first = d.GetWorkflowExecutionInfo().GetFirstRunId()
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, time.Minute, 50*time.Millisecond)
	handedOver := history(t, s, id, first)
	require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, handedOver.Events[len(handedOver.Events)-1].GetEventType())
	dir := filepath.Join("..", "workflows", "testdata", "histories", courier.KindRowlessTimer.Workflow)
	writeNew(t, filepath.Join(dir, "continued-as-new.json"), handedOver)
	writeNew(t, filepath.Join(dir, "continued-then-cancelled.json"), history(t, s, id, ""))
}

func history(t *testing.T, s *stack, id, runID string) *historypb.History {
	hist := &historypb.History{}
	it := s.tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		hist.Events = append(hist.Events, ev)
	}
	return hist
}

// TestRecordBucketedTimerHistories records the bucketed mode's and the failure path's
// histories (make record-histories): a bucket that delivered its timers, a bucketed timer
// retried by a run of its own that then failed and notified its type's failure target, a timer
// of its own that failed and notified, and its redelivery. Each only where it is missing.
func TestRecordBucketedTimerHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	s := newStack(t, "sqlite")
	rcv, url, secret := newBucketReceiver(t)
	ctx := context.Background()
	for _, mode := range []courier.TimerMode{courier.TimerModeBucketed, courier.TimerModeWorkflow} {
		_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "rec." + string(mode), Delivery: courier.DeliveryHTTP,
			CallbackURL: url, Secrets: []string{secret}, TimerMode: mode, MaxAttempts: 2,
			RetryInitial: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond, FailureURL: url + "/failed"})
		require.NoError(t, err)
	}
	s.timerWorker(false)
	svc := s.timerService()
	rowless := s.rowlessTimerService() // the timer of its own as it was armed before rows were kept
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(1500 * time.Millisecond)
	rcv.set("failing", http.StatusServiceUnavailable)
	rcv.set("failing-own", http.StatusServiceUnavailable)
	for _, r := range []api.TimerRequest{
		{BizType: "rec.bucketed", BizID: "b-1", When: api.At(at)},
		{BizType: "rec.bucketed", BizID: "b-2", When: api.At(at.Add(300 * time.Millisecond))},
		{BizType: "rec.bucketed", BizID: "failing", When: api.At(at.Add(600 * time.Millisecond))},
		{BizType: "rec.workflow", BizID: "failing-own", When: api.At(at)},
	} {
		create := svc.Create
		if r.BizType == "rec.workflow" {
			create = rowless.Create
		}
		_, _, err := create(ctx, r)
		require.NoError(t, err)
	}
	closed := func(id string) bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	bucket := courier.TimerBucketWorkflowID("rec.bucketed", courier.TimerBucket(at))
	handed := courier.TimerWorkflowID("rec.bucketed", "failing")
	own := courier.TimerWorkflowID("rec.workflow", "failing-own")
	for _, id := range []string{bucket, handed, own} {
		require.Eventually(t, func() bool { return closed(id) }, time.Minute, 50*time.Millisecond, id)
	}
	require.Eventually(t, func() bool { return len(rcv.failureEvents()) == 2 }, time.Minute, 50*time.Millisecond)
	writeNew(t, filepath.Join("..", "workflows", "testdata", "histories", courier.KindTimerBucket.Workflow, "delivered.json"), history(t, s, bucket, ""))
	dir := filepath.Join("..", "workflows", "testdata", "histories", courier.KindRowlessTimer.Workflow)
	writeNew(t, filepath.Join(dir, "bucketed-retried-failed-notified.json"), history(t, s, handed, ""))
	writeNew(t, filepath.Join(dir, "failed-notified.json"), history(t, s, own, ""))

	rcv.set("failing-own", 0)
	first, err := s.tc.DescribeWorkflowExecution(ctx, own, "")
	require.NoError(t, err)
	_, err = rowless.Redeliver(ctx, "rec.workflow", "failing-own")
	require.NoError(t, err)
	var runID string
	require.Eventually(t, func() bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, own, "")
		if err != nil || d.GetWorkflowExecutionInfo().GetExecution().GetRunId() == first.GetWorkflowExecutionInfo().GetExecution().GetRunId() {
			return false
		}
		runID = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	}, time.Minute, 50*time.Millisecond)
	writeNew(t, filepath.Join(dir, "redelivered.json"), history(t, s, own, runID))
}

// TestRecordRowTimerHistories records the histories of timers of their own that follow their
// rows (make record-histories), each only where it is missing: delivered, rescheduled (by the
// API, a signal), cancelled (by the API), cancelled by an update (a client from before rows),
// failed and notified; and a bucket that reserves its batches before delivering them, woken
// before its timers' fire time, so its first reserve holds nothing and it waits for them
// (reserve-waits.json; reserved.json was recorded before it waited, when the bucket scheduled a
// delivery for that empty reserve).
func TestRecordRowTimerHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	s := newStack(t, "sqlite")
	rcv, url, secret := newBucketReceiver(t)
	ctx := context.Background()
	for _, b := range []courier.BizType{
		{Name: "rec.row", Delivery: courier.DeliveryHTTP, CallbackURL: url, Secrets: []string{secret}, MaxAttempts: 2,
			RetryInitial: 100 * time.Millisecond, RetryMax: 200 * time.Millisecond, FailureURL: url + "/failed"},
		{Name: "rec.bucketed", Delivery: courier.DeliveryHTTP, CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed},
	} {
		_, _, err := s.store.PutBizType(ctx, b)
		require.NoError(t, err)
	}
	s.timerWorker(false)
	svc := s.timerService()
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
	rcv.set("failed", http.StatusServiceUnavailable)
	for _, id := range []string{"delivered", "rescheduled", "cancelled", "cancelled-by-update", "failed"} {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "rec.row", BizID: id, When: api.At(at), Payload: json.RawMessage(`{"rec":1}`)})
		require.NoError(t, err)
	}
	for _, id := range []string{"b-1", "b-2"} {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "rec.bucketed", BizID: id, When: api.At(at)})
		require.NoError(t, err)
	}
	_, err := svc.Reschedule(ctx, "rec.row", "rescheduled", at.Add(time.Second))
	require.NoError(t, err)
	_, err = svc.Cancel(ctx, "rec.row", "cancelled")
	require.NoError(t, err)
	h, err := s.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: courier.TimerWorkflowID("rec.row", "cancelled-by-update"),
		UpdateName: workflows.UpdateCancel, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	require.NoError(t, h.Get(ctx, nil))

	closed := func(id string) bool {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories", courier.KindTimer.Workflow)
	for _, c := range []string{"delivered", "rescheduled", "cancelled", "cancelled-by-update", "failed"} {
		id := courier.TimerWorkflowID("rec.row", c)
		require.Eventually(t, func() bool { return closed(id) }, time.Minute, 50*time.Millisecond, id)
		file := c
		if c == "failed" {
			file = "failed-notified"
		}
		writeNew(t, filepath.Join(dir, file+".json"), history(t, s, id, ""))
	}
	require.Len(t, rcv.failureEvents(), 1)
	bucket := courier.TimerBucketWorkflowID("rec.bucketed", courier.TimerBucket(at))
	require.Eventually(t, func() bool { return closed(bucket) }, time.Minute, 50*time.Millisecond, bucket)
	writeNew(t, filepath.Join("..", "workflows", "testdata", "histories", courier.KindTimerBucket.Workflow, "reserve-waits.json"), history(t, s, bucket, ""))
}

// TestRecordOrderedHistories records ordered key delivery histories (make record-histories):
// a key's records sent in one run; sent after failed attempts (the backoff on a timer); a key
// blocked by a record no stream captures (blocked.json, recorded when such a run completed;
// blocked-failed.json, since it fails with the record's state upserted). And the per-record delivery of a record whose topic
// is paused (outbox-delivery/paused.json): held without an attempt, the run ends.
func TestRecordOrderedHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories")
	for _, c := range []struct {
		name     string
		topic    string
		failures int
	}{
		{"sent", "orders.created", 0},
		{"retried-then-sent", "orders.created", 2},
		{"blocked", "nowhere.created", 0},
		{"blocked-failed", "nowhere.created", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStack(t, "sqlite")
			s.createStream("ORDERS", "orders.>")
			pub := &flakyPublisher{Publisher: s.pub, failures: c.failures, seen: map[string]int{}}
			cfg := relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry,
				Ordered: relay.OrderedConfig{Sources: []string{courier.DefaultSource}}}
			w, err := worker.New(worker.Config{Relay: cfg}, worker.Deps{
				Temporal: s.tc, Publisher: pub, Logger: quiet,
				Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
			})
			require.NoError(t, err)
			ctx := context.Background()
			// Committed before the worker starts, so one run takes all three.
			require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := outbox.Enqueue(ctx, tx,
					outbox.Message{Topic: c.topic, Key: "order-1", Payload: []byte(`{"n":1}`)},
					outbox.Message{Topic: "orders.updated", Key: "order-1", Payload: []byte(`{"n":2}`)},
					outbox.Message{Topic: "orders.updated", Key: "order-1", Payload: []byte(`{"n":3}`)})
				return err
			}))
			require.NoError(t, w.Start(ctx))
			defer w.Stop()
			wid := courier.OutboxKeyWorkflowID("", "order-1")
			require.Eventually(t, func() bool {
				d, err := s.tc.DescribeWorkflowExecution(ctx, wid, "")
				return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			}, time.Minute, 50*time.Millisecond)
			writeNew(t, filepath.Join(dir, courier.KindOutboxKey.Workflow, c.name+".json"), history(t, s, wid, ""))
		})
	}
	t.Run("paused", func(t *testing.T) {
		s := newStack(t, "sqlite")
		s.createStream("ORDERS", "orders.>")
		ctx := context.Background()
		var ids []int64
		require.NoError(t, s.store.DB().RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var err error
			ids, err = outbox.Enqueue(ctx, tx, outbox.Message{Topic: "orders.created", Payload: []byte(`{"recorded":true}`)})
			return err
		}))
		// The record is claimed and its run started before the pause; its attempt meets it.
		claimed, err := s.store.ClaimOutbox(ctx, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		s.watchPauses()
		_, _, err = s.store.Pause(ctx, courier.Pause{Kind: courier.PauseTopic, Name: "orders.>"})
		require.NoError(t, err)
		require.Eventually(t, func() bool { _, ok := s.paused.Current().Topic("orders.created"); return ok }, 10*time.Second, 20*time.Millisecond)
		w, err := worker.New(worker.Config{Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry}, DisableRelay: true}, worker.Deps{
			Temporal: s.tc, Publisher: s.pub, Logger: quiet, Pauses: s.paused,
			Sources: []relay.Source{{Name: courier.DefaultSource, Store: s.store}},
		})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		defer w.Stop()
		wid := courier.OutboxWorkflowID("", ids[0])
		_, err = s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: relay.DefaultTaskQueue},
			courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{ID: ids[0], Retry: testRetry, FinalState: true, QuietSuccess: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			d, err := s.tc.DescribeWorkflowExecution(ctx, wid, "")
			return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		}, time.Minute, 50*time.Millisecond)
		rec, err := s.store.GetOutbox(ctx, ids[0])
		require.NoError(t, err)
		require.Equal(t, courier.OutboxPending, rec.Status)
		require.Zero(t, rec.Attempts)
		// paused.json was recorded before QuietSuccess (FinalState only) and is kept.
		writeNew(t, filepath.Join(dir, courier.KindOutbox.Workflow, "paused-quiet-success.json"), history(t, s, wid, ""))
	})
}
