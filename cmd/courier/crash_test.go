package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/webhook"
)

// crashLoad is what the load generator had acknowledged (a 2xx answer), and what the receivers
// saw.
type crashLoad struct {
	mu       sync.Mutex
	outbox   map[int64]bool       // acknowledged outbox record ids
	timers   map[string]time.Time // acknowledged timer biz ids → their fire time
	tasks    map[string]bool      // acknowledged task ids
	fired    map[string]time.Time // timer callbacks received (first), by biz id
	early    []string             // timers whose callback came before their fire time
	working  map[string]int       // tasks a worker is working on now
	maxWork  int                  // most distinct tasks worked on at once
	finished map[string]bool      // tasks whose result courier accepted
}

// courier dev is SIGKILLed twice in the middle of mixed load (outbox publishes, half of them in
// the batch mode, timers, tasks)
// and restarted on the same data dir each time. Everything it acknowledged is delivered: every
// record reaches the stream, every timer fires once its time has come and never before, every
// task finishes; no task slot stays taken, and the workers never see more tasks at once than the
// queue's concurrency limit.
func TestDevSurvivesSIGKILLUnderMixedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	dir := t.TempDir()
	ports := map[string]int{"http": freePort(t), "temporal": freePort(t), "ui": freePort(t), "nats": freePort(t)}
	args := []string{"--data-dir", dir, "--http-port", strconv.Itoa(ports["http"]), "--temporal-port", strconv.Itoa(ports["temporal"]),
		"--ui-port", strconv.Itoa(ports["ui"]), "--nats-port", strconv.Itoa(ports["nats"]), "--shutdown-timeout", "5s",
		// Half the records go out in the outbox batch mode, so kills land in batches too.
		"--outbox-batch-topics", "crash.batched"}
	gw := fmt.Sprintf("http://127.0.0.1:%d", ports["http"])
	start := func() *devProc {
		p := startDev(t, args...)
		p.waitAnswers(t, gw+"/readyz")
		return p
	}
	kill := func(p *devProc) {
		require.NoError(t, p.cmd.Process.Kill())
		<-p.done
		p.done <- nil // the cleanup waits on it too
	}

	p := start()
	require.Eventually(t, func() bool { _, err := os.Stat(filepath.Join(dir, "dev-api-key")); return err == nil }, 30*time.Second, 50*time.Millisecond)
	keyB, err := os.ReadFile(filepath.Join(dir, "dev-api-key"))
	require.NoError(t, err)
	key := strings.TrimSpace(string(keyB))

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"]))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "CRASH", Subjects: []string{"crash.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	nc.Close()

	l := &crashLoad{outbox: map[int64]bool{}, timers: map[string]time.Time{}, tasks: map[string]bool{},
		fired: map[string]time.Time{}, working: map[string]int{}, finished: map[string]bool{}}

	// The timer receiver: verifies the signature and notes when each timer first fired.
	var verifier atomic.Pointer[webhook.Verifier]
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(r.Body)
		v := verifier.Load()
		if v == nil || v.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var cb struct {
			BizID string `json:"biz_id"`
		}
		_ = json.Unmarshal(body, &cb)
		l.mu.Lock()
		if _, seen := l.fired[cb.BizID]; !seen {
			l.fired[cb.BizID] = now
			if at, ok := l.timers[cb.BizID]; ok && now.Before(at) {
				l.early = append(l.early, cb.BizID)
			}
		}
		l.mu.Unlock()
	}))
	defer rcv.Close()
	var bt struct {
		GeneratedSecret string `json:"generated_secret"`
	}
	require.Equal(t, 201, httpJSON(t, "PUT", gw+"/v1/biz-types/crash.due", key, map[string]any{"delivery": "http", "callback_url": rcv.URL}, &bt))
	v, err := webhook.NewVerifier(bt.GeneratedSecret)
	require.NoError(t, err)
	verifier.Store(v)

	// The task worker: accepts a push, works 300 ms, then posts the result, retrying while
	// courier is down as a real worker would.
	stopWorkers := make(chan struct{})
	var workers sync.WaitGroup
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var push struct {
			TaskID    string `json:"task_id"`
			Attempt   int    `json:"attempt"`
			ResultURL string `json:"result_url"`
		}
		if err := json.NewDecoder(r.Body).Decode(&push); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		l.mu.Lock()
		l.working[push.TaskID]++
		l.maxWork = max(l.maxWork, len(l.working))
		l.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		workers.Add(1)
		go func() {
			defer workers.Done()
			time.Sleep(300 * time.Millisecond) // the work itself: it keeps tasks at the worker long enough to count concurrency
			l.mu.Lock()
			if l.working[push.TaskID]--; l.working[push.TaskID] == 0 {
				delete(l.working, push.TaskID)
			}
			l.mu.Unlock()
			body := fmt.Sprintf(`{"attempt":%d,"status":"success","result":{"ok":true}}`, push.Attempt)
			for try := 0; try < 600; try++ { // up to two minutes
				req, _ := http.NewRequest("POST", push.ResultURL, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode < 500 {
						return
					}
				}
				select {
				case <-stopWorkers:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}))
	defer func() { close(stopWorkers); workers.Wait(); worker.Close() }()
	const limit = 3
	require.Equal(t, 200, httpJSON(t, "PUT", gw+"/v1/queues/default", key, map[string]any{"push_url": worker.URL,
		"concurrency_limit": limit, "processing_timeout": "20s"}, nil))

	// The load: a bounded number of rounds of one publish, one timer and one task each, until
	// told to stop. Only answered requests count; the ones cut off by a kill are unknown and
	// need not be delivered (they may be).
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	send := func(method, path string, body any, out any) bool {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, gw+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return false
		}
		return json.NewDecoder(resp.Body).Decode(out) == nil
	}
	go func() {
		defer close(loadDone)
		for i := 0; i < 400; i++ {
			select {
			case <-stopLoad:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var rec struct {
				ID int64 `json:"id"`
			}
			topic := "crash.created"
			if i%2 == 1 {
				topic = "crash.batched"
			}
			if send("POST", "/v1/outbox", map[string]any{"topic": topic, "payload": map[string]int{"i": i}}, &rec) {
				l.mu.Lock()
				l.outbox[rec.ID] = true
				l.mu.Unlock()
			}
			var tm struct {
				BizID  string    `json:"biz_id"`
				FireAt time.Time `json:"fire_at"`
			}
			if send("POST", "/v1/timers", map[string]any{"biz_type": "crash.due", "biz_id": fmt.Sprintf("t-%d", i),
				"delay": fmt.Sprintf("%ds", 2+i%5)}, &tm) {
				l.mu.Lock()
				l.timers[tm.BizID] = tm.FireAt
				l.mu.Unlock()
			}
			var task struct {
				TaskID string `json:"task_id"`
			}
			if send("POST", "/v1/tasks", map[string]any{"task_id": fmt.Sprintf("k-%d", i), "task_version": 1, "priority": 1 + i%5}, &task) {
				l.mu.Lock()
				l.tasks[task.TaskID] = true
				l.mu.Unlock()
			}
		}
	}()
	acknowledged := func() (int, int, int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.outbox), len(l.timers), len(l.tasks)
	}

	// Two kills, each after some load was acknowledged, each followed by a restart.
	for round := 1; round <= 2; round++ {
		o0, _, _ := acknowledged()
		require.Eventually(t, func() bool { o, tm, tk := acknowledged(); return o >= o0+20 && tm >= 20*round && tk >= 20*round },
			2*time.Minute, 50*time.Millisecond, "load is acknowledged before kill %d", round)
		kill(p)
		p = start() // requests meet a dead gateway until the new process answers
	}
	o0, _, _ := acknowledged()
	require.Eventually(t, func() bool { o, _, _ := acknowledged(); return o >= o0+10 }, 2*time.Minute, 50*time.Millisecond, "load after the last restart")
	close(stopLoad)
	<-loadDone

	nOutbox, nTimers, nTasks := acknowledged()
	t.Logf("acknowledged: %d records, %d timers, %d tasks", nOutbox, nTimers, nTasks)

	// Every acknowledged record is in the stream.
	nc, err = nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", ports["nats"]))
	require.NoError(t, err)
	defer nc.Close()
	js, err = jetstream.New(nc)
	require.NoError(t, err)
	inStream := func() map[int64]bool {
		got := map[int64]bool{}
		st, err := js.Stream(t.Context(), "CRASH")
		require.NoError(t, err)
		info, err := st.Info(t.Context())
		require.NoError(t, err)
		if info.State.Msgs == 0 {
			return got
		}
		cons, err := st.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		for n := uint64(0); n < info.State.Msgs; {
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
			require.NoError(t, err)
			for m := range batch.Messages() {
				if id, err := strconv.ParseInt(m.Headers().Get("Courier-Message-Id"), 10, 64); err == nil {
					got[id] = true
				}
				n++
			}
			require.NoError(t, batch.Error())
		}
		return got
	}
	var missing []int64
	require.Eventually(t, func() bool {
		got := inStream()
		missing = missing[:0]
		l.mu.Lock()
		for id := range l.outbox {
			if !got[id] {
				missing = append(missing, id)
			}
		}
		l.mu.Unlock()
		return len(missing) == 0
	}, 3*time.Minute, time.Second, "every acknowledged record reaches the stream (missing %v)", missing)

	// Every acknowledged timer fired, none early.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for id := range l.timers {
			if _, ok := l.fired[id]; !ok {
				return false
			}
		}
		return true
	}, 3*time.Minute, 200*time.Millisecond, "every acknowledged timer fires")
	l.mu.Lock()
	require.Empty(t, l.early, "no timer fires before its time")
	l.mu.Unlock()

	// Every acknowledged task finished; no slot is left taken; the limit held.
	var notDone []string
	require.Eventually(t, func() bool {
		notDone = notDone[:0]
		l.mu.Lock()
		ids := make([]string, 0, len(l.tasks))
		for id := range l.tasks {
			ids = append(ids, id)
		}
		l.mu.Unlock()
		for _, id := range ids {
			var task struct {
				Status string `json:"status"`
			}
			if httpJSON(t, "GET", gw+"/v1/tasks/"+id, key, nil, &task) != 200 || task.Status != "success" {
				notDone = append(notDone, id+":"+task.Status)
			}
		}
		return len(notDone) == 0
	}, 4*time.Minute, time.Second, "every acknowledged task finishes (not yet: %v)", notDone)
	var q struct {
		InFlight int `json:"in_flight"`
	}
	require.Equal(t, 200, httpJSON(t, "GET", gw+"/v1/queues/default", key, nil, &q))
	require.Zero(t, q.InFlight, "no slot stays taken")
	l.mu.Lock()
	t.Logf("most tasks worked on at once: %d (limit %d)", l.maxWork, limit)
	require.LessOrEqual(t, l.maxWork, limit, "workers never had more tasks at once than the queue's limit")
	l.mu.Unlock()
}
