package activities

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
)

// repeatStore answers a batch's pushes: MarkBatchPushed returns the attempts still due, in the
// order due says (a database returns updated rows in no set order).
type repeatStore struct {
	TaskStore
	queue courier.Queue
	mu    sync.Mutex
	due   []string // task ids still due, in the order MarkBatchPushed returns them
	moves []string // MoveBatchedAttempts calls, "from → to"
}

func (s *repeatStore) MarkBatchPushed(_ context.Context, _ string, attempts []store.BatchAttempt) ([]courier.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []courier.Task
	for _, id := range s.due {
		for _, a := range attempts {
			if a.TaskID == id {
				deadline := time.Now().Add(time.Minute)
				out = append(out, courier.Task{TaskID: a.TaskID, Version: a.Version, Attempt: a.Attempt, Queue: s.queue.Name,
					Status: courier.TaskProcessing, Payload: json.RawMessage(`{}`), DeadlineAt: &deadline})
			}
		}
	}
	return out, nil
}

func (s *repeatStore) GetQueue(context.Context, string) (courier.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queue, nil
}

// A batch's push repeated after a crash (the run's workflow task taken by another worker)
// pushes only the attempts still due, and each of them carries the webhook-id its first push
// carried, whatever the database's order, the attempts that left meanwhile, and a
// push_batch_size changed since the claim: a worker that deduplicates on webhook-id (Standard
// Webhooks) recognises every repeat. A single push's webhook-id is its attempt's delivery id.
func TestRepeatedBatchPushKeepsWebhookIDs(t *testing.T) {
	secret := "whsec_" + strings.Repeat("A", 32)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string][]string{} // delivery id → webhook-ids of the requests that carried it
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := v.Verify(body, r.Header); err != nil && err != webhook.ErrReplay {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var b api.TaskPushBatch
		if json.Unmarshal(body, &b) != nil || len(b.Tasks) == 0 {
			var p api.TaskPush
			require.NoError(t, json.Unmarshal(body, &p))
			b.Tasks = []api.TaskPush{p}
		}
		mu.Lock()
		for _, p := range b.Tasks {
			seen[p.DeliveryID] = append(seen[p.DeliveryID], r.Header.Get(webhook.HeaderID))
		}
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name         string
		size, sizeAt int // push_batch_size at the claim, and at the repeat
	}{
		{"single pushes", 1, 1},
		{"batched pushes", 3, 3},
		{"batched pushes, size changed before the repeat", 3, 2},
		{"single pushes, then batched", 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clear(seen)
			ids := []string{"a", "b", "c", "d", "e", "f", "g"}
			st := &repeatStore{queue: courier.Queue{Name: "q", PushURL: srv.URL, Secrets: []string{secret}, PushBatchSize: tc.size},
				due: ids}
			a := NewTasks(TasksDeps{Store: st, PublicURL: "http://courier.test", AllowLoopback: true})
			p := contract.PushBatchParams{Queue: "q", Batch: "task-batch/q/1", PushBatchSize: tc.size}
			for _, id := range ids {
				p.Attempts = append(p.Attempts, contract.BatchAttempt{TaskID: id, Version: 1, Attempt: 1, ProcessingTimeout: time.Minute})
			}
			r, err := a.PushBatch(t.Context(), p)
			require.NoError(t, err)
			require.Equal(t, len(ids), r.Pushed)

			// The repeat: a, c and f have their results; the rest come back in another order,
			// under another push_batch_size.
			st.mu.Lock()
			st.due = []string{"g", "e", "d", "b"}
			st.queue.PushBatchSize = tc.sizeAt
			st.mu.Unlock()
			r, err = a.PushBatch(t.Context(), p)
			require.NoError(t, err)
			require.Equal(t, 4, r.Pushed)
			require.Equal(t, 3, r.Stale)

			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				delivery := courier.TaskAttemptDeliveryID(id, 1, 1)
				got := seen[delivery]
				pushes := 1
				if strings.Contains("gedb", id) {
					pushes = 2
				}
				require.Len(t, got, pushes, "pushes of %s", id)
				require.Equal(t, got[0], got[len(got)-1], "every push of %s carries one webhook-id", id)
				if tc.size <= 1 {
					require.Equal(t, delivery, got[0], "a single push's webhook-id is its attempt's delivery id")
				}
			}
		})
	}
}

// MoveBatchedAttempts records the hand-off of a failed request's attempts.
func (s *repeatStore) MoveBatchedAttempts(_ context.Context, from, to string, attempts []store.AttemptKey, _ time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.moves = append(s.moves, from+" → "+to)
	return len(attempts), nil
}

// A batched push whose request fails on the way leaves the batch after its first try: its
// attempts move to the run of their next try, started after the wait with the request's
// webhook-id, and the batch's push ends at once with the other request taken. That run makes
// the try (here taken) and counts the attempts pushed.
func TestFailedBatchRequestIsHandedOn(t *testing.T) {
	var mu sync.Mutex
	tries := map[string][]string{} // first task id of a request → the webhook-ids of its tries
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b api.TaskPushBatch
		require.NoError(t, json.NewDecoder(r.Body).Decode(&b))
		mu.Lock()
		first := b.Tasks[0].TaskID
		tries[first] = append(tries[first], r.Header.Get(webhook.HeaderID))
		n := len(tries[first])
		mu.Unlock()
		if first == "c" && n == 1 {
			w.Header().Set("Retry-After", "2")
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	secret := "whsec_" + strings.Repeat("B", 32)
	st := &repeatStore{queue: courier.Queue{Name: "q", PushURL: srv.URL, Secrets: []string{secret}, PushBatchSize: 2},
		due: []string{"a", "b", "c", "d"}}
	type retry struct {
		p     contract.PushBatchParams
		delay time.Duration
	}
	var retries []retry
	a := NewTasks(TasksDeps{Store: st, PublicURL: "http://courier.test", AllowLoopback: true,
		RetryPush: func(_ context.Context, p contract.PushBatchParams, delay time.Duration) error {
			retries = append(retries, retry{p, delay})
			return nil
		}})
	p := contract.PushBatchParams{Queue: "q", Batch: "task-batch/q/1", PushBatchSize: 2, PushTimeout: time.Second}
	for _, id := range st.due {
		p.Attempts = append(p.Attempts, contract.BatchAttempt{TaskID: id, Version: 1, Attempt: 1, ProcessingTimeout: time.Minute})
	}
	start := time.Now()
	r, err := a.PushBatch(t.Context(), p)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 2*time.Second, "the batch does not wait out the Retry-After")
	require.Equal(t, contract.PushBatchResult{Pushed: 2, Handed: 2}, r)
	require.Equal(t, []string{"task-batch/q/1 → task-batch/q/1.1.try2"}, st.moves)
	require.Len(t, retries, 1)
	rp := retries[0].p
	require.Equal(t, 2*time.Second, retries[0].delay, "started after the worker's Retry-After")
	require.Equal(t, "task-batch/q/1.1.try2", rp.Batch)
	require.Equal(t, 2, rp.Try)
	require.Equal(t, p.Attempts[2:], rp.Attempts)
	require.Equal(t, 2, rp.PushBatchSize)
	mu.Lock()
	require.Equal(t, rp.WebhookID, tries["c"][0], "the run of the tries carries the request's webhook-id")
	mu.Unlock()

	// The run of the tries: its attempts are its batch's now.
	st.mu.Lock()
	st.due = []string{"d", "c"}
	st.mu.Unlock()
	r, err = a.PushBatch(t.Context(), rp)
	require.NoError(t, err)
	require.Equal(t, contract.PushBatchResult{Pushed: 2}, r)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{rp.WebhookID, rp.WebhookID}, tries["c"], "the same webhook-id on the next try")
}
