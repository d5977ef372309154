package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
)

// finishCall is one FinishTaskAttempt the activities made.
type finishCall struct {
	taskID  string
	version int64
	attempt int
	outcome contract.AttemptOutcome
}

// lifecycleStore is a canned TaskStore for Finish and Sweep: each method answers from its
// fields and records what it was asked. The push's method is not used here.
type lifecycleStore struct {
	activities.TaskStore

	mu       sync.Mutex
	finish   func(finishCall) (store.FinishResult, error) // nil: applied, the task succeeded
	finishes []finishCall

	queues   []courier.Queue
	expired  []int64 // answers of successive ExpirePendingTasks calls; then 0
	stopped  map[string][]int64
	purged   map[string][]int64
	repairs  []store.LimiterRepair
	overdue  []dispatch.Attempt
	failStep string // the step that answers errStep

	calls []string // "expire 500", "stop parse 24h0m0s 500", …
}

var errStep = errors.New("database is down")

func (s *lifecycleStore) record(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

func take(answers *[]int64) int64 {
	if len(*answers) == 0 {
		return 0
	}
	n := (*answers)[0]
	*answers = (*answers)[1:]
	return n
}

func (s *lifecycleStore) FinishTaskAttempt(_ context.Context, taskID string, version int64, attempt int, o contract.AttemptOutcome) (store.FinishResult, error) {
	c := finishCall{taskID, version, attempt, o}
	s.mu.Lock()
	s.finishes = append(s.finishes, c)
	s.mu.Unlock()
	if s.finish != nil {
		return s.finish(c)
	}
	return store.FinishResult{Applied: true, Recorded: true, Status: courier.TaskSuccess, Queue: "parse"}, nil
}

func (s *lifecycleStore) ListQueues(context.Context) ([]courier.Queue, error) {
	s.record("list queues")
	if s.failStep == "list" {
		return nil, errStep
	}
	return s.queues, nil
}

func (s *lifecycleStore) ExpirePendingTasks(_ context.Context, limit int) (int64, error) {
	s.record("expire " + itoa(limit))
	if s.failStep == "expire" {
		return 0, errStep
	}
	return take(&s.expired), nil
}

func (s *lifecycleStore) StopSucceededTasks(_ context.Context, queue string, retention time.Duration, limit int) (int64, error) {
	s.record("stop " + queue + " " + retention.String() + " " + itoa(limit))
	a := s.stopped[queue]
	n := take(&a)
	if s.stopped != nil {
		s.stopped[queue] = a
	}
	return n, nil
}

func (s *lifecycleStore) PurgeTasks(_ context.Context, queue string, age time.Duration, limit int) (int64, error) {
	s.record("purge " + queue + " " + age.String() + " " + itoa(limit))
	a := s.purged[queue]
	n := take(&a)
	if s.purged != nil {
		s.purged[queue] = a
	}
	return n, nil
}

func (s *lifecycleStore) ReconcileLimiters(context.Context) ([]store.LimiterRepair, error) {
	s.record("reconcile")
	return s.repairs, nil
}

func (s *lifecycleStore) OverdueTasks(_ context.Context, grace time.Duration, limit int) ([]dispatch.Attempt, error) {
	s.record("overdue " + grace.String() + " " + itoa(limit))
	return s.overdue, nil
}

// count reads a counter's value.
func count(t *testing.T, c prometheus.Counter) float64 {
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func itoa(n int) string { return strconv.Itoa(n) }

// workflowStatuses answers DescribeWorkflowExecution from a status per workflow id; an id it
// does not know is not found.
type workflowStatuses map[string]enumspb.WorkflowExecutionStatus

func (w workflowStatuses) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	st, ok := w[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: st}}, nil
}

// Finish hands the store the attempt's outcome as it came, answers what the store did, counts
// the outcome and frees the claimers to claim again.
func TestFinishRecordsTheOutcome(t *testing.T) {
	st := &lifecycleStore{finish: func(finishCall) (store.FinishResult, error) {
		return store.FinishResult{Applied: true, Recorded: true, Status: courier.TaskPending, NextAttemptAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Queue: "parse"}, nil
	}}
	m := metrics.NewTasks(prometheus.NewRegistry())
	woken := 0
	a := activities.NewTasks(activities.TasksDeps{Store: st, Metrics: m, Wake: func() { woken++ }})
	out := contract.AttemptOutcome{Kind: courier.OutcomeFailure, StatusCode: 503, Message: "upstream down", Result: json.RawMessage("null")}

	v, err := runActivity(t, a.Finish, contract.FinishTaskParams{TaskID: "doc-1", Version: 2, Attempt: 3, Outcome: out})

	require.NoError(t, err)
	var res contract.FinishTaskResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, contract.FinishTaskResult{Applied: true, Status: courier.TaskPending, NextAttemptAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}, res)
	require.Equal(t, []finishCall{{"doc-1", 2, 3, out}}, st.finishes)
	require.Equal(t, 1, woken, "a freed slot wakes the claimers")
	require.Equal(t, 1.0, count(t, m.Results.WithLabelValues("parse", string(courier.OutcomeFailure))))
}

// A finish the row did not take (the task had moved on) changes nothing: no count, no wake-up;
// nor does one that finds its success already recorded.
// A store error is returned for Temporal to retry: the slot must not stay taken.
func TestFinishOfAStaleAttemptOrAFailedWrite(t *testing.T) {
	m := metrics.NewTasks(prometheus.NewRegistry())
	woken := 0
	stale := &lifecycleStore{finish: func(finishCall) (store.FinishResult, error) {
		return store.FinishResult{Applied: false, Status: courier.TaskCancelled, Queue: "parse"}, nil
	}}
	a := activities.NewTasks(activities.TasksDeps{Store: stale, Metrics: m, Wake: func() { woken++ }})
	p := contract.FinishTaskParams{TaskID: "doc-1", Version: 2, Attempt: 3, Outcome: contract.AttemptOutcome{Kind: courier.OutcomeSuccess}}

	v, err := runActivity(t, a.Finish, p)

	require.NoError(t, err)
	var res contract.FinishTaskResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, contract.FinishTaskResult{Applied: false, Status: courier.TaskCancelled}, res)
	require.Zero(t, woken)
	require.Zero(t, count(t, m.Results.WithLabelValues("parse", string(courier.OutcomeSuccess))))

	// The same success, recorded first by the gateway as it accepted it: the run's outcome is
	// in the row (Applied for the workflow), but it was counted and woke the claimers there.
	recorded := &lifecycleStore{finish: func(finishCall) (store.FinishResult, error) {
		return store.FinishResult{Recorded: true, Status: courier.TaskSuccess, Queue: "parse"}, nil
	}}
	v, err = runActivity(t, activities.NewTasks(activities.TasksDeps{Store: recorded, Metrics: m, Wake: func() { woken++ }}).Finish, p)
	require.NoError(t, err)
	require.NoError(t, v.Get(&res))
	require.Equal(t, contract.FinishTaskResult{Applied: true, Status: courier.TaskSuccess}, res)
	require.Zero(t, woken)
	require.Zero(t, count(t, m.Results.WithLabelValues("parse", string(courier.OutcomeSuccess))), "counted once, by the writer")

	down := &lifecycleStore{finish: func(finishCall) (store.FinishResult, error) { return store.FinishResult{}, errStep }}
	_, err = runActivity(t, activities.NewTasks(activities.TasksDeps{Store: down}).Finish, p)
	require.ErrorContains(t, err, errStep.Error())
	require.False(t, appErr(t, err).NonRetryable(), "a failed write is retried")
}

// A sweep runs each step in batches until one comes back short, at most MaxBatches per step
// and queue, with each queue's own retention and purge age; it adds up what changed, checks
// the limiters, and wakes the claimers when slots may have been freed.
func TestSweepRunsEachStepInBatches(t *testing.T) {
	parse := courier.Queue{Name: "parse", SuccessRetention: time.Hour, PurgeAge: 48 * time.Hour}
	mail := courier.Queue{Name: "mail", SuccessRetention: 2 * time.Hour, PurgeAge: 72 * time.Hour}
	st := &lifecycleStore{
		queues:  []courier.Queue{parse, mail},
		expired: []int64{10, 10, 3},                                         // two full batches, then a short one
		stopped: map[string][]int64{"parse": {10, 10, 10, 10}, "mail": {4}}, // parse is cut at MaxBatches
		purged:  map[string][]int64{"mail": {1}},
		repairs: []store.LimiterRepair{{Queue: "mail", Recorded: 3, Counted: 2}},
	}
	m := metrics.NewTasks(prometheus.NewRegistry())
	woken := 0
	a := activities.NewTasks(activities.TasksDeps{Store: st, Metrics: m, Wake: func() { woken++ }})

	v, err := runActivity(t, a.Sweep, contract.SweepParams{BatchSize: 10, MaxBatches: 3})

	require.NoError(t, err)
	var res contract.SweepResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, contract.SweepResult{Expired: 23, Stopped: 34, Purged: 1, LimiterRepairs: 1}, res)
	require.Equal(t, []string{
		"expire 10", "expire 10", "expire 10",
		"list queues",
		"stop parse 1h0m0s 10", "stop parse 1h0m0s 10", "stop parse 1h0m0s 10",
		"purge parse 48h0m0s 10",
		"stop mail 2h0m0s 10",
		"purge mail 72h0m0s 10",
		"reconcile",
	}, st.calls, "no workflow describer: the orphan check is skipped")
	require.Equal(t, 1, woken)
	require.Equal(t, 1.0, count(t, m.LimiterRepairs.WithLabelValues("mail")))
}

// Without a size, a sweep takes 500 rows per statement; a sweep that changed nothing that frees
// a slot does not wake the claimers; a failing step ends the sweep with its error, for
// Temporal to retry.
func TestSweepDefaultsAndErrors(t *testing.T) {
	st := &lifecycleStore{}
	woken := 0
	a := activities.NewTasks(activities.TasksDeps{Store: st, Wake: func() { woken++ }})

	_, err := runActivity(t, a.Sweep, contract.SweepParams{})

	require.NoError(t, err)
	require.Equal(t, []string{"expire 500", "list queues", "reconcile"}, st.calls)
	require.Zero(t, woken)

	failing := &lifecycleStore{failStep: "list", expired: []int64{2}}
	_, err = runActivity(t, activities.NewTasks(activities.TasksDeps{Store: failing}).Sweep, contract.SweepParams{})
	require.ErrorContains(t, err, errStep.Error())
	require.Equal(t, []string{"expire 500", "list queues"}, failing.calls, "nothing after the failed step runs")
}

// Attempts in Processing well past their deadline are finished as timed out when their
// workflow no longer runs (ended, or not found at all); one whose workflow still runs is left
// to Temporal.
func TestSweepFinishesOrphanedAttempts(t *testing.T) {
	st := &lifecycleStore{overdue: []dispatch.Attempt{
		{TaskID: "running", Version: 1, Attempt: 1, Queue: "parse"},
		{TaskID: "terminated", Version: 2, Attempt: 4, Queue: "parse"},
		{TaskID: "lost", Version: 1, Attempt: 2, Queue: "mail"},
		{TaskID: "moved-on", Version: 1, Attempt: 1, Queue: "mail"},
	}}
	st.finish = func(c finishCall) (store.FinishResult, error) {
		return store.FinishResult{Applied: c.taskID != "moved-on", Status: courier.TaskPending, Queue: "parse"}, nil
	}
	m := metrics.NewTasks(prometheus.NewRegistry())
	woken := 0
	a := activities.NewTasks(activities.TasksDeps{Store: st, Metrics: m, Wake: func() { woken++ }, Workflows: workflowStatuses{
		courier.TaskWorkflowID("running", 1):    enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		courier.TaskWorkflowID("terminated", 2): enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED,
		courier.TaskWorkflowID("moved-on", 1):   enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
	}})

	v, err := runActivity(t, a.Sweep, contract.SweepParams{BatchSize: 50})

	require.NoError(t, err)
	var res contract.SweepResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, 2, res.Orphaned, "the finishes the rows took")
	require.Contains(t, st.calls, "overdue "+activities.OverdueGrace.String()+" 50")
	timedOut := contract.AttemptOutcome{Kind: courier.OutcomeTimeout,
		Message: "processing timeout: the attempt's workflow ended without recording a result"}
	require.Equal(t, []finishCall{{"terminated", 2, 4, timedOut}, {"lost", 1, 2, timedOut}, {"moved-on", 1, 1, timedOut}}, st.finishes)
	require.Equal(t, 1, woken)
	require.Equal(t, 1.0, count(t, m.Results.WithLabelValues("parse", string(courier.OutcomeTimeout))), "counted under the attempt's queue")
	require.Equal(t, 1.0, count(t, m.Results.WithLabelValues("mail", string(courier.OutcomeTimeout))))
}
