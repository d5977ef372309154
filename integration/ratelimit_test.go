package integration

import (
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// A business type limited to 5 deliveries per second holds to it however many of its timers are
// due at once and however many workers run, while another type's timers are not held up by
// that backlog: each type has its own task queue.
func TestBizTypeRateLimitAndIsolation(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("slow.type", 5)
	s.bizType("fast.type", 0)
	s.timerWorker(false) // two workers, as two processes would run
	s.timerWorker(false)
	ctx := t.Context()
	svc := s.timerService()
	const slowN, fastN = 30, 20
	due := time.Now().Add(3 * time.Second)
	for i := 0; i < slowN; i++ {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "slow.type", BizID: fmt.Sprintf("s-%d", i), When: api.At(due), Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	fastDue := due.Add(time.Second) // while the slow type's backlog is still draining
	for i := 0; i < fastN; i++ {
		_, _, err := svc.Create(ctx, api.TimerRequest{BizType: "fast.type", BizID: fmt.Sprintf("f-%d", i), When: api.At(fastDue), Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return len(rcv.got) == slowN+fastN
	}, 2*time.Minute, 50*time.Millisecond)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var slowArrived time.Time
	var fastLast time.Time
	for id, at := range rcv.got {
		require.Len(t, at, 1, id)
		if id[0] == 's' {
			if at[0].After(slowArrived) {
				slowArrived = at[0]
			}
		} else if at[0].After(fastLast) {
			fastLast = at[0]
		}
	}
	require.True(t, fastLast.Before(slowArrived), "the fast type finished while the slow type was still draining")

	// The server holds the queue to the rate when it hands a delivery to a worker: that is
	// when the history records the delivery activity started. (Arrival times at the receiver
	// add the HTTP round trip's jitter, which on a loaded machine alone can put one delivery
	// more into a window.)
	var slow []time.Time
	for i := 0; i < slowN; i++ {
		it := s.tc.GetWorkflowHistory(ctx, courier.TimerWorkflowID("slow.type", fmt.Sprintf("s-%d", i)), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var started time.Time
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			if ev.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED {
				started = ev.GetEventTime().AsTime()
			}
		}
		require.False(t, started.IsZero(), "s-%d: no delivery started", i)
		slow = append(slow, started)
	}
	sort.Slice(slow, func(i, j int) bool { return slow[i].Before(slow[j]) })
	// At 5/s (with at most one second's burst) 30 deliveries need at least 5 s.
	require.GreaterOrEqual(t, slow[len(slow)-1].Sub(slow[0]), 4*time.Second, "the slow type was held to its rate")
	for i := range slow {
		n := 0
		for j := i; j < len(slow) && slow[j].Sub(slow[i]) < 2*time.Second; j++ {
			n++
		}
		require.LessOrEqual(t, n, 15, "no two-second window holds more than rate×2 plus one burst")
	}
}
