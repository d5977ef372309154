package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// TestRecordHistories re-records the replay histories under workflows/testdata from real runs
// on a real server. It runs only with COURIER_RECORD_HISTORIES=1 (make record-histories).
func TestRecordHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	dir := filepath.Join("..", "workflows", "testdata", "histories")
	// Each case is recorded from a run the relay starts with code version v. Histories of runs
	// started before code versions existed (v 0: sent, retried-then-sent, dead-unknown-topic,
	// dead-after-budget without the state, and the *-state and dead-fails-* ones with it) are
	// what runs started by older workers look like: kept, and no relay can start such runs
	// again. Record one version's cases with -run 'TestRecordHistories/v2'.
	cases := []struct {
		name     string
		v        int
		topic    string
		failures int
	}{
		{"sent-state", 0, "orders.created", 0},
		{"retried-then-sent-state", 0, "orders.created", 2},
		{"dead-fails-unknown-topic", 0, "nowhere.created", 0},
		{"dead-fails-after-budget", 0, "orders.created", -1},
		// workflows.OutboxInputV: no version marker, no "sent".
		{"sent-v1", workflows.OutboxInputV, "orders.created", 0},
		{"dead-v1-unknown-topic", workflows.OutboxInputV, "nowhere.created", 0},
		// workflows.OutboxLocalFirstV: the first attempt is a local activity; after it fails,
		// the first backoff on a timer and the rest of the budget in the activity.
		{"sent-v2", workflows.OutboxLocalFirstV, "orders.created", 0},
		{"retried-then-sent-v2", workflows.OutboxLocalFirstV, "orders.created", 2},
		{"dead-v2-unknown-topic", workflows.OutboxLocalFirstV, "nowhere.created", 0},
		{"dead-v2-after-budget", workflows.OutboxLocalFirstV, "orders.created", -1},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("v%d/%s", c.v, c.name), func(t *testing.T) {
			path := filepath.Join(dir, "outbox-delivery", c.name+".json")
			if c.v == 0 {
				_, err := os.Stat(path)
				require.NoError(t, err, "%s is missing and cannot be recorded again: it is a run of a relay from before code versions", path)
				t.Skipf("kept %s", path)
			}
			s := newStack(t, "sqlite")
			s.createStream("ORDERS", "orders.>")
			pub := &flakyPublisher{Publisher: s.pub, failures: c.failures, seen: map[string]int{}}
			w, err := worker.New(worker.Config{Relay: relay.Config{PollInterval: 50 * time.Millisecond, Retry: testRetry, CodeVersion: c.v}}, worker.Deps{
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
			hist := &historypb.History{}
			it := s.tc.GetWorkflowHistory(ctx, wid, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				require.NoError(t, err)
				hist.Events = append(hist.Events, ev)
			}
			write(t, path, hist)

			if c.name == "sent-v1" {
				// A deliberately incompatible history: the recorded run scheduled an activity the
				// current code never schedules. Replay must reject it.
				for _, ev := range hist.Events {
					if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
						a.ActivityType.Name = "outbox-deliver-v0"
					}
				}
				writeNew(t, filepath.Join(dir, "broken", "outbox-delivery-renamed-activity.json"), hist)
			}
		})
	}
}

// writeNew writes a history only where none was recorded: a recorded history is what runs of
// its time look like, and replaying it is the point.
func writeNew(t *testing.T, path string, hist *historypb.History) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Logf("kept %s", path)
		return
	}
	write(t, path, hist)
}

func write(t *testing.T, path string, hist *historypb.History) {
	t.Helper()
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, b, 0o644))
	t.Logf("recorded %s (%d events)", path, len(hist.Events))
	require.False(t, strings.Contains(string(b), "TODO"))
}

// TestRecordTimerHistories records timer workflow histories (make record-histories).
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
	svc := s.timerService()
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
	dir := filepath.Join("..", "workflows", "testdata", "histories", "timer")
	// A failed delivery's run fails: it is written as delivery-failed.json, beside failed.json,
	// which a run recorded before that completed and is never re-recorded. Since the timer
	// service starts runs with workflows.TimerV these are written as <case>-v1.json, beside the
	// ones recorded before it (kept, never re-recorded); schedule runs do not carry it, so
	// schedule-run.json is written only when missing.
	for _, c := range []string{"delivered", "rescheduled", "cancelled", "failed"} {
		typ, file := "rec.ok", c
		if c == "failed" {
			typ, file = "rec.gone", "delivery-failed"
		}
		id := courier.TimerWorkflowID(typ, c)
		require.Eventually(t, func() bool { return closed(id) }, time.Minute, 50*time.Millisecond, id)
		write(t, filepath.Join(dir, file+"-v1.json"), history(t, s, id, ""))
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
// reschedules. It writes the run that handed over and the run that was then cancelled, beside
// the timer histories recorded before timers continued as new, as <name>-v1.json since runs
// carry workflows.TimerV.
func TestRecordTimerContinuedHistories(t *testing.T) {
	if os.Getenv("COURIER_RECORD_HISTORIES") == "" {
		t.Skip("set COURIER_RECORD_HISTORIES=1 to re-record workflow histories")
	}
	s := newStack(t, "sqlite", lowUpdateLimits())
	s.bizType("rec.ok", 0)
	s.timerWorker(false)
	svc := s.timerService()
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
	dir := filepath.Join("..", "workflows", "testdata", "histories", "timer")
	write(t, filepath.Join(dir, "continued-as-new-v1.json"), handedOver)
	write(t, filepath.Join(dir, "continued-then-cancelled-v1.json"), history(t, s, id, ""))
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
