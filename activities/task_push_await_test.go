package activities_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
)

// An accepted push leaves the attempt's one activity open for the result (the gateway
// completes it by its id), after recording the run and telling the worker the deadline.
func TestPushAwaitStaysOpenOnceTheWorkerAccepts(t *testing.T) {
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	st := &pushStore{queue: pushQueue(ep.url)}
	a := activities.NewTasks(activities.TasksDeps{Store: st, PublicURL: "http://courier.example:8080/", AllowLoopback: true})
	p := pushParams
	p.Deadline = time.Now().Add(7 * time.Minute).UTC().Truncate(time.Millisecond)

	_, err := runActivity(t, a.PushAwait, p)

	require.ErrorIs(t, err, activity.ErrResultPending)
	require.Len(t, ep.pushes, 1)
	require.True(t, p.Deadline.Equal(ep.pushes[0].Deadline), "the worker is told the workflow's deadline")
	require.Equal(t, "http://courier.example:8080/v1/tasks/doc-1/versions/2/result", ep.pushes[0].ResultURL)
	require.Equal(t, "task/doc-1/2/3", ep.ids[0])
	require.Len(t, st.marks, 1)
	require.NotEmpty(t, st.marks[0].runID, "the push records the run it belongs to")
	require.Equal(t, 30*time.Second, st.marks[0].heartbeat, "and its heartbeat timeout: the gateway completes this activity")
}

// Tries that fail on the way are tried again within the activity, with the same webhook id,
// until the worker accepts.
func TestPushAwaitTriesAgainUntilAccepted(t *testing.T) {
	var n atomic.Int32
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	st := &pushStore{queue: pushQueue(ep.url)}
	a := activities.NewTasks(activities.TasksDeps{Store: st, PublicURL: "http://courier.example", AllowLoopback: true})
	p := pushParams
	p.Deadline = time.Now().Add(time.Minute)

	_, err := runActivity(t, a.PushAwait, p)

	require.ErrorIs(t, err, activity.ErrResultPending)
	require.Len(t, ep.pushes, 2, "the 503 was tried again")
	require.Equal(t, ep.ids[0], ep.ids[1], "every try carries the attempt's webhook id")
	require.Len(t, st.marks, 1, "the attempt is marked pushed once")
}

// A refused push (4xx) fails the attempt at once; tries that keep failing on the way fail it
// after courier.PushTries tries. Neither is retried by Temporal.
func TestPushAwaitFailsTheAttempt(t *testing.T) {
	for name, tc := range map[string]struct {
		status   int
		tries    int
		contains string
	}{
		"refused":     {status: http.StatusUnprocessableEntity, tries: 1, contains: "422"},
		"tries spent": {status: http.StatusBadGateway, tries: courier.PushTries, contains: "3 tries failed on the way"},
	} {
		t.Run(name, func(t *testing.T) {
			ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) })
			a := activities.NewTasks(activities.TasksDeps{Store: &pushStore{queue: pushQueue(ep.url)}, PublicURL: "http://courier.example", AllowLoopback: true})
			p := pushParams
			p.Deadline = time.Now().Add(time.Minute)

			_, err := runActivity(t, a.PushAwait, p)

			ae := appErr(t, err)
			require.Equal(t, contract.ErrTypePushFailed, ae.Type(), "%v", err)
			require.True(t, ae.NonRetryable())
			require.Contains(t, ae.Error(), tc.contains)
			require.Len(t, ep.pushes, tc.tries)
		})
	}
}

// An attempt the task has moved past sends nothing.
func TestPushAwaitOfAStaleAttemptSendsNothing(t *testing.T) {
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	a := activities.NewTasks(activities.TasksDeps{Store: &pushStore{queue: pushQueue(ep.url), stale: true}, PublicURL: "http://courier.example", AllowLoopback: true})

	_, err := runActivity(t, a.PushAwait, pushParams)

	ae := appErr(t, err)
	require.Equal(t, contract.ErrTypeTaskStale, ae.Type())
	require.Empty(t, ep.pushes)
}

// The waits between tries: doubling from PushRetryInitial, at most PushRetryMax.
func TestPushBackoff(t *testing.T) {
	require.Equal(t, time.Second, contract.PushBackoff(1))
	require.Equal(t, 2*time.Second, contract.PushBackoff(2))
	require.Equal(t, 4*time.Second, contract.PushBackoff(3))
	require.Equal(t, contract.PushRetryMax, contract.PushBackoff(10))
}

// A worker that asks for a longer wait than courier takes within an attempt (Retry-After past
// contract.PushRetryMax) fails the attempt at once: the queue's retry policy waits instead,
// without holding a push slot that other queues' pushes share.
func TestPushAwaitLongRetryAfterEndsTheAttempt(t *testing.T) {
	ep := startPushEndpoint(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	a := activities.NewTasks(activities.TasksDeps{Store: &pushStore{queue: pushQueue(ep.url)}, PublicURL: "http://courier.example", AllowLoopback: true})
	p := pushParams
	p.Deadline = time.Now().Add(time.Hour)

	_, err := runActivity(t, a.PushAwait, p)

	ae := appErr(t, err)
	require.Equal(t, contract.ErrTypePushFailed, ae.Type())
	require.Contains(t, ae.Error(), "asked to wait 10m0s")
	require.Len(t, ep.pushes, 1)
}
