package activities_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
)

// pushStore answers MarkTaskPushed for one task and records what each call was given; the
// other store methods are not used by the push activities.
type pushStore struct {
	activities.TaskStore
	queue courier.Queue
	stale bool // the task has moved on: every push is refused

	mu    sync.Mutex
	marks []pushMark
}

type pushMark struct {
	attempt   int
	remaining time.Duration
	runID     string
	heartbeat time.Duration // the attempt's heartbeat timeout, recorded with the run
}

func (s *pushStore) MarkTaskPushed(_ context.Context, taskID string, version int64, attempt int, remaining time.Duration, run store.AttemptRun) (store.PushTarget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	runID := run.ID
	s.marks = append(s.marks, pushMark{attempt, remaining, runID, run.HeartbeatTimeout})
	if s.stale {
		return store.PushTarget{}, false, nil
	}
	t := courier.Task{TaskID: taskID, Version: version, Queue: s.queue.Name, Priority: 2, Status: courier.TaskProcessing,
		Payload: json.RawMessage(`{"file":"a.pdf"}`), Attempt: attempt, RunID: runID, CreatedAt: time.Now()}
	return store.PushTarget{Task: t, Queue: s.queue}, true, nil
}

// pushEndpoint is a task worker's push endpoint: answer decides each push's reply; it records the pushes and
// their webhook ids.
type pushEndpoint struct {
	url    string
	mu     sync.Mutex
	pushes []api.TaskPush
	ids    []string
}

func startPushEndpoint(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *pushEndpoint {
	e := &pushEndpoint{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		require.NoError(t, json.NewDecoder(r.Body).Decode(&p))
		e.mu.Lock()
		e.pushes = append(e.pushes, p)
		e.ids = append(e.ids, r.Header.Get(webhook.HeaderID))
		e.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

func pushQueue(url string) courier.Queue {
	secret, _ := webhook.GenerateSecret()
	return courier.Queue{Name: "parse", PushURL: url, Secrets: []string{secret}}.WithDefaults()
}

// pushParams is an attempt with a heartbeat timeout (pushed by PushAwait); SendPush's tests
// take it without.
var pushParams = contract.PushTaskParams{TaskID: "doc-1", Version: 2, Attempt: 3, ProcessingTimeout: 10 * time.Minute,
	HeartbeatTimeout: 30 * time.Second, PushTimeout: 5 * time.Second}

func runActivity(t *testing.T, fn any, p any) (converter.EncodedValue, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(fn)
	return env.ExecuteActivity(fn, p)
}

// An accepted push ends the activity (the run waits for the result itself), records the run
// and the time left to the deadline, and tells the worker the workflow's deadline, where to
// report, and a webhook id per attempt.
func TestSendPushEndsWhenTheWorkerAccepts(t *testing.T) {
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	st := &pushStore{queue: pushQueue(ep.url)}
	a := activities.NewTasks(activities.TasksDeps{Store: st, PublicURL: "http://courier.example:8080/", AllowLoopback: true})
	p := pushParams
	p.HeartbeatTimeout = 0
	p.Deadline = time.Now().Add(7 * time.Minute).UTC().Truncate(time.Millisecond)

	v, err := runActivity(t, a.SendPush, p)

	require.NoError(t, err)
	var res contract.SendPushResult
	require.NoError(t, v.Get(&res))
	require.Equal(t, int32(1), res.Try)
	require.Len(t, ep.pushes, 1)
	got := ep.pushes[0]
	require.True(t, p.Deadline.Equal(got.Deadline), "the worker is told the workflow's deadline")
	require.Zero(t, got.HeartbeatTimeout)
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, "http://courier.example:8080/v1/tasks/doc-1/versions/2/result", got.ResultURL)
	require.Equal(t, "http://courier.example:8080/v1/tasks/doc-1/versions/2/heartbeat", got.HeartbeatURL)
	require.Equal(t, "task/doc-1/2/3", ep.ids[0])
	require.Len(t, st.marks, 1)
	require.Equal(t, 3, st.marks[0].attempt)
	require.NotEmpty(t, st.marks[0].runID, "the push records the run it belongs to")
	require.Zero(t, st.marks[0].heartbeat, "and that it has no heartbeat timeout")
	require.InDelta(t, float64(7*time.Minute), float64(st.marks[0].remaining), float64(5*time.Second), "the row's deadline is the workflow's")
}

// How a push that was not accepted is classified: answers that may change (429, 5xx, with the
// worker's Retry-After) and no answer within the push timeout are retryable within the
// attempt; a 4xx answer is final.
func TestSendPushClassifiesRefusals(t *testing.T) {
	for name, tc := range map[string]struct {
		answer    func(w http.ResponseWriter, r *http.Request)
		errType   string
		retryable bool
		after     time.Duration
	}{
		"429 with Retry-After": {answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}, errType: contract.ErrTypePushUnanswered, retryable: true, after: 7 * time.Second},
		"503": {answer: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) },
			errType: contract.ErrTypePushUnanswered, retryable: true},
		"no answer within the push timeout": {answer: func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() },
			errType: contract.ErrTypePushUnanswered, retryable: true},
		"422": {answer: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnprocessableEntity) },
			errType: contract.ErrTypePushFailed},
	} {
		t.Run(name, func(t *testing.T) {
			ep := startPushEndpoint(t, tc.answer)
			a := activities.NewTasks(activities.TasksDeps{Store: &pushStore{queue: pushQueue(ep.url)}, PublicURL: "http://courier.example", AllowLoopback: true})
			p := pushParams
			p.PushTimeout = 300 * time.Millisecond
			p.Deadline = time.Now().Add(time.Minute)

			_, err := runActivity(t, a.SendPush, p)

			ae := appErr(t, err)
			require.Equal(t, tc.errType, ae.Type(), "%v", err)
			require.Equal(t, !tc.retryable, ae.NonRetryable())
			require.Equal(t, tc.after, ae.NextRetryDelay())
			require.Len(t, ep.pushes, 1, "one HTTP request per try")
		})
	}
}

// A push for an attempt the task has moved past sends nothing and is stale.
func TestSendPushOfAStaleAttemptSendsNothing(t *testing.T) {
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	a := activities.NewTasks(activities.TasksDeps{Store: &pushStore{queue: pushQueue(ep.url), stale: true}, PublicURL: "http://courier.example", AllowLoopback: true})

	_, err := runActivity(t, a.SendPush, pushParams)

	ae := appErr(t, err)
	require.Equal(t, contract.ErrTypeTaskStale, ae.Type())
	require.True(t, ae.NonRetryable())
	require.Empty(t, ep.pushes)
}

// The pushes of attempts without a heartbeat timeout are local activities, which the push
// worker's activity slots do not bound: LocalPushSlots does. With one slot, a second local push
// waits until the first has its answer, and a push-and-wait (an activity, bounded by the push
// worker's slots) is not held back by it.
func TestLocalPushesAreBounded(t *testing.T) {
	var held atomic.Int32
	gate := make(chan struct{})
	ep := startPushEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		if r.Header.Get(webhook.HeaderID) == "task/doc-1/2/1" {
			<-gate
		}
		w.WriteHeader(http.StatusAccepted)
	})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the endpoint closes, which waits for the held push
	st := &pushStore{queue: pushQueue(ep.url)}
	a := activities.NewTasks(activities.TasksDeps{Store: st, PublicURL: "http://courier.example:8080/", AllowLoopback: true, LocalPushSlots: 1})
	local := func(attempt int) chan error {
		done := make(chan error, 1)
		go func() {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			env.RegisterActivity(a.SendPush)
			p := pushParams
			p.Attempt = attempt
			_, err := env.ExecuteLocalActivity(a.SendPush, p)
			done <- err
		}()
		return done
	}
	first := local(1)
	require.Eventually(t, func() bool { return held.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	second := local(2)
	_, err := runActivity(t, a.PushAwait, func() contract.PushTaskParams { p := pushParams; p.Attempt = 3; return p }())
	require.ErrorIs(t, err, activity.ErrResultPending, "a push-and-wait takes no local push slot")
	require.Never(t, func() bool { return held.Load() > 2 }, 300*time.Millisecond, 10*time.Millisecond, "the second local push waits for the slot")
	open()
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.EqualValues(t, 3, held.Load())
}
