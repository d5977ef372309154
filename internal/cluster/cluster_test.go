package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/webhook"
	"github.com/courier-oss/courier/workflows"
)

// prerequisite skips the test outside CI when the machine lacks what the topology needs, and
// fails it in CI (CI=true), where .ci/run installs it.
func prerequisite(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrPrerequisite) && os.Getenv("CI") == "" {
		t.Skipf("skipping the cluster test: %v", err)
	}
	t.Fatal(err)
}

// startCluster builds the binaries and starts the topology in a fresh directory; the cluster
// is stopped and the directory removed when the test ends, and on a failure the tail of every
// process's log is printed.
func startCluster(t *testing.T, courierEnv ...string) *Cluster {
	t.Helper()
	_, err := PostgresBinDir()
	prerequisite(t, err)
	_, err = postgresCredential()
	prerequisite(t, err)
	// Not t.TempDir: as root, PostgreSQL runs as the postgres user, which must reach its data
	// directory, and the test's temp dirs are private to root.
	dir, err := os.MkdirTemp("", "courier-cluster-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	start := time.Now()
	bins, err := Build(t.Context(), dir+"/bin", nil)
	prerequisite(t, err)
	built := time.Since(start)
	c, err := Start(t.Context(), Config{Dir: dir, Binaries: bins, CourierEnv: courierEnv,
		Progress: func(s string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), s) }})
	if err != nil {
		printLogs(t, dir+"/logs")
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			printLogs(t, dir+"/logs")
		}
	})
	t.Logf("cluster up in %.1fs (binaries built in %.1fs):\n%s", time.Since(start).Seconds(), built.Seconds(), c.Describe())
	return c
}

// printLogs prints the last lines of every log file in dir.
func printLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		for i, l := range lines {
			if len(l) > 400 {
				lines[i] = l[:400] + "…"
			}
		}
		t.Logf("--- %s (last %d lines)\n%s", e.Name(), len(lines), strings.Join(lines, "\n"))
	}
}

// api calls the gateways: a request goes to the gateway its caller picks, and to the other
// one if that one refuses the connection (as a load balancer in front of them would do; a
// refused connection reached no gateway, so the retry cannot duplicate anything).
type api struct {
	gateways []string
	key      string
	hc       *http.Client
}

// do sends one request and decodes a 2xx answer into out; it returns the status (0 when no
// gateway answered).
func (a *api) do(ctx context.Context, gw int, method, path string, body, out any) int {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	for try := range len(a.gateways) {
		base := a.gateways[(gw+try)%len(a.gateways)]
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		req, _ := http.NewRequestWithContext(rctx, method, base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+a.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := a.hc.Do(req)
		if err != nil {
			cancel()
			if refused(err) {
				continue
			}
			return 0
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode < 300 && out != nil {
			if json.Unmarshal(data, out) != nil {
				return 0
			}
		}
		return resp.StatusCode
	}
	return 0
}

func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// load is what the load generator had acknowledged (a 2xx answer) and what the receivers saw,
// each with the time it happened.
type load struct {
	mu        sync.Mutex
	outboxAck map[int64]time.Time     // acknowledged record id → when
	arrived   map[int64]time.Time     // record id → first arrival in the stream
	dupes     int                     // arrivals of a record already in the stream
	timerAck  map[string]time.Time    // acknowledged timer biz id → its fire time
	fired     map[string]time.Time    // timer biz id → first callback
	early     []string                // timers whose callback came before their fire time
	cancelled map[string]bool         // biz ids of timers whose cancel was acknowledged
	taskAck   map[string]time.Time    // acknowledged task id → when
	success   map[string]map[int]bool // task id → attempts whose success courier accepted
	succeeded map[string]time.Time    // task id → when its first success was accepted
	pushes    map[string]int          // task id → pushes the worker received
	latepush  []string                // pushes of a task after its success was accepted
	working   map[string]int          // tasks the worker is working on now
	maxWork   int                     // most distinct tasks worked on at once
	ticks     []time.Time             // schedule callbacks
}

func newLoad() *load {
	return &load{outboxAck: map[int64]time.Time{}, arrived: map[int64]time.Time{}, timerAck: map[string]time.Time{},
		fired: map[string]time.Time{}, cancelled: map[string]bool{}, taskAck: map[string]time.Time{},
		success: map[string]map[int]bool{}, succeeded: map[string]time.Time{}, pushes: map[string]int{}, working: map[string]int{}}
}

// flow is, for each kind of work, how long after a fault the first item that was acknowledged
// (timers: due) after it was done.
type flow struct {
	Outbox, Tasks, Timers, Schedule time.Duration
}

// flowedSince reports, per kind, the first completion of an item acknowledged (a timer: due)
// at or after t0, as a duration from t0; ok once every kind has one.
func (l *load) flowedSince(t0 time.Time) (f flow, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := func(done time.Time, cur time.Duration, have bool) (time.Duration, bool) {
		d := done.Sub(t0)
		if !have || d < cur {
			return d, true
		}
		return cur, true
	}
	var o, k, tm, s bool
	for id, at := range l.outboxAck {
		if arr, in := l.arrived[id]; in && !at.Before(t0) {
			f.Outbox, o = first(arr, f.Outbox, o)
		}
	}
	for id, at := range l.taskAck {
		if done, in := l.succeeded[id]; in && !at.Before(t0) {
			f.Tasks, k = first(done, f.Tasks, k)
		}
	}
	for id, due := range l.timerAck {
		if arr, in := l.fired[id]; in && !due.Before(t0) {
			f.Timers, tm = first(arr, f.Timers, tm)
		}
	}
	for _, at := range l.ticks {
		if !at.Before(t0) {
			f.Schedule, s = first(at, f.Schedule, s)
		}
	}
	return f, o && k && tm && s
}

// caughtUp reports how long after t0 the last of the work acknowledged before t0 (timers: due
// before t0) was done, and which item that was; ok once all of it is.
func (l *load) caughtUp(t0 time.Time) (d time.Duration, last string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = true
	l.each(func(what string, from, done time.Time, isDone bool) {
		if !from.Before(t0) {
			return
		}
		if !isDone {
			ok = false
			return
		}
		if done.Sub(t0) > d {
			d, last = done.Sub(t0), what
		}
	})
	return d, last, ok
}

// worst reports the longest any item acknowledged (timers: due) in [from, to) took to be done
// (outbox: commit to stream, tasks: insert to accepted success, timers: due to callback), and
// which item that was; ok once all of them are done.
func (l *load) worst(from, to time.Time) (d time.Duration, which string, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = true
	l.each(func(what string, start, done time.Time, isDone bool) {
		if start.Before(from) || !start.Before(to) {
			return
		}
		if !isDone {
			ok = false
			return
		}
		if done.Sub(start) > d {
			d, which = done.Sub(start), what
		}
	})
	return d, which, ok
}

// each calls f for every acknowledged item: when it was acknowledged (a timer: due), when it
// was done, and whether it is. The caller holds l.mu.
func (l *load) each(f func(what string, start, done time.Time, isDone bool)) {
	for id, at := range l.outboxAck {
		arr, in := l.arrived[id]
		f(fmt.Sprintf("outbox record %d", id), at, arr, in)
	}
	for id, at := range l.taskAck {
		fin, in := l.succeeded[id]
		f("task "+id, at, fin, in)
	}
	for id, due := range l.timerAck {
		arr, in := l.fired[id]
		f("timer "+id, due, arr, in)
	}
}

func (l *load) acknowledged() (outbox, timers, tasks int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.outboxAck), len(l.timerAck), len(l.taskAck)
}

const (
	queueLimit       = 3
	scheduleInterval = 3 * time.Second
	workTime         = 500 * time.Millisecond
)

// The production topology under faults. Mixed load goes through both gateways (outbox records,
// timers with signed HTTP callbacks, some of them cancelled, tasks on a queue with a
// concurrency limit of 3, and an interval schedule) while, one after another, a courier
// worker is SIGKILLed and restarted, a gateway is SIGKILLed (and later restarted), Temporal's
// history process is SIGKILLed and restarted, its matching process likewise, and courier's
// PostgreSQL is restarted (immediate shutdown, so it recovers from its log). After each fault
// the test waits until work of every kind acknowledged after the fault is done, and logs how
// long that took. Then: every acknowledged record is in the stream, every acknowledged timer
// fired and none early, no timer whose cancel was acknowledged fired, every acknowledged task
// succeeded exactly once (one accepted success, no push after it), the worker never held more
// tasks than the limit, no slot stays taken, and the schedule fired after the last fault.
// Before the faults, the operators' view: a dead record, a failed task and a failed timer are
// listed as Failed with their reasons through the Temporal API and the UI server's API, which
// also shows courier's search attributes.
func TestClusterUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Temporal's services, two PostgreSQL servers and courier's processes")
	}
	began := time.Now()
	c := startCluster(t)
	ctx := t.Context()
	a := &api{gateways: c.GatewayURLs(), key: c.APIKey(), hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}}
	l := newLoad()

	// The stream, consumed from the start: the first arrival of each record id.
	nc, err := nats.Connect(c.NATSURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CLUSTER", Subjects: []string{"cluster.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		id, err := strconv.ParseInt(m.Headers().Get("Courier-Message-Id"), 10, 64)
		if err != nil {
			return
		}
		l.mu.Lock()
		if _, seen := l.arrived[id]; seen {
			l.dupes++
		} else {
			l.arrived[id] = now
		}
		l.mu.Unlock()
	})
	require.NoError(t, err)
	defer cc.Stop()

	// Timer and schedule callbacks: signature checked, first arrival noted.
	var verifier atomic.Pointer[webhook.Verifier]
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(r.Body)
		if v := verifier.Load(); v == nil || v.Verify(body, r.Header) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var cb struct {
			BizType string    `json:"biz_type"`
			BizID   string    `json:"biz_id"`
			FireAt  time.Time `json:"fire_at"`
		}
		_ = json.Unmarshal(body, &cb)
		l.mu.Lock()
		defer l.mu.Unlock()
		if cb.BizType == "cluster.tick" {
			l.ticks = append(l.ticks, now)
			return
		}
		if _, seen := l.fired[cb.BizID]; !seen {
			l.fired[cb.BizID] = now
			if due, ok := l.timerAck[cb.BizID]; ok && now.Before(due) {
				l.early = append(l.early, cb.BizID)
			}
		}
	}))
	defer rcv.Close()
	var secret struct {
		GeneratedSecret string `json:"generated_secret"`
	}
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/biz-types/cluster.due", map[string]any{"delivery": "http", "callback_url": rcv.URL}, &secret))
	v, err := webhook.NewVerifier(secret.GeneratedSecret)
	require.NoError(t, err)
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/biz-types/cluster.tick", map[string]any{"delivery": "http", "callback_url": rcv.URL,
		"secrets": []string{secret.GeneratedSecret}}, nil))
	verifier.Store(v)

	// The task worker: takes a push, works 500 ms, then reports success, retrying while no
	// gateway takes the result (its link names the first gateway; a refused connection goes to
	// the other, as through a load balancer).
	stopWorkers := make(chan struct{})
	var working sync.WaitGroup
	tw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		l.pushes[push.TaskID]++
		if _, done := l.succeeded[push.TaskID]; done {
			l.latepush = append(l.latepush, fmt.Sprintf("%s attempt %d", push.TaskID, push.Attempt))
		}
		l.working[push.TaskID]++
		l.maxWork = max(l.maxWork, len(l.working))
		l.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		working.Add(1)
		go func() {
			defer working.Done()
			select { // the work itself: holds the task long enough to count concurrency
			case <-time.After(workTime):
			case <-stopWorkers:
			}
			l.mu.Lock()
			if l.working[push.TaskID]--; l.working[push.TaskID] == 0 {
				delete(l.working, push.TaskID)
			}
			l.mu.Unlock()
			u, err := url.Parse(push.ResultURL)
			if err != nil {
				return
			}
			path := u.Path
			body := map[string]any{"attempt": push.Attempt, "status": "success", "result": map[string]bool{"ok": true}}
			for try := 0; try < 600; try++ { // up to two minutes
				switch st := a.do(ctx, 0, "POST", path, body, nil); {
				case st >= 200 && st < 300:
					l.mu.Lock()
					if l.success[push.TaskID] == nil {
						l.success[push.TaskID] = map[int]bool{}
					}
					l.success[push.TaskID][push.Attempt] = true
					if _, done := l.succeeded[push.TaskID]; !done {
						l.succeeded[push.TaskID] = time.Now()
					}
					l.mu.Unlock()
					return
				case st >= 400 && st < 500:
					return // a stale attempt: courier has another one
				}
				select {
				case <-stopWorkers:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}))
	defer func() { close(stopWorkers); working.Wait(); tw.Close() }()
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/queues/cluster", map[string]any{"push_url": tw.URL,
		"concurrency_limit": queueLimit, "processing_timeout": "30s"}, nil))

	operatorsSeeFailures(t, c, a)

	// The schedule: a callback every 3 s, a missed one still fired within a minute.
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/schedules/cluster-tick", map[string]any{"biz_type": "cluster.tick",
		"interval": scheduleInterval.String(), "catchup_window": "1m"}, nil))

	// The load: bounded rounds, each through the next gateway: a record, a timer due in 2-6 s,
	// a task, and every fourth round a timer due in 20 s that is cancelled at once. Tasks come
	// at 5/s and take 500 ms, and every tenth round brings four more: more than the queue's
	// limit of 3 would be at the worker at times if the limit did not hold.
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for i := 0; i < 3000; i++ {
			select {
			case <-stopLoad:
				return
			case <-time.After(200 * time.Millisecond):
			}
			gw := i % 2
			var rec struct {
				ID int64 `json:"id"`
			}
			if a.do(ctx, gw, "POST", "/v1/outbox", map[string]any{"topic": "cluster.created", "payload": map[string]int{"i": i}}, &rec) == 201 {
				l.mu.Lock()
				l.outboxAck[rec.ID] = time.Now()
				l.mu.Unlock()
			}
			var tm struct {
				BizID  string    `json:"biz_id"`
				FireAt time.Time `json:"fire_at"`
			}
			if st := a.do(ctx, gw, "POST", "/v1/timers", map[string]any{"biz_type": "cluster.due", "biz_id": fmt.Sprintf("t-%d", i),
				"delay": fmt.Sprintf("%ds", 2+i%5)}, &tm); st == 201 {
				l.mu.Lock()
				l.timerAck[tm.BizID] = tm.FireAt
				l.mu.Unlock()
			}
			ids := []string{fmt.Sprintf("k-%d", i)}
			if i%10 == 0 {
				for j := range 4 {
					ids = append(ids, fmt.Sprintf("k-%d-%d", i, j))
				}
			}
			for _, id := range ids {
				var task struct {
					TaskID string `json:"task_id"`
				}
				if a.do(ctx, gw, "POST", "/v1/tasks", map[string]any{"task_id": id, "task_version": 1,
					"priority": 1 + i%5, "queue": "cluster"}, &task) == 201 {
					l.mu.Lock()
					l.taskAck[task.TaskID] = time.Now()
					l.mu.Unlock()
				}
			}
			if i%4 == 0 {
				id := fmt.Sprintf("c-%d", i)
				if a.do(ctx, gw, "POST", "/v1/timers", map[string]any{"biz_type": "cluster.due", "biz_id": id, "delay": "20s"}, nil) == 201 &&
					a.do(ctx, gw, "DELETE", "/v1/timers/cluster.due/"+id, nil, nil) == 200 {
					l.mu.Lock()
					l.cancelled[id] = true
					l.mu.Unlock()
				}
			}
		}
	}()
	defer func() {
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
		<-loadDone
	}()

	// waitFlow waits until work of every kind acknowledged after t0 is done, and returns how
	// long after t0 each kind first was.
	waitFlow := func(what string, t0 time.Time) flow {
		var f flow
		require.Eventually(t, func() bool {
			var ok bool
			f, ok = l.flowedSince(t0)
			return ok
		}, 4*time.Minute, 100*time.Millisecond, "work flows again after %s", what)
		return f
	}
	warm := time.Now()
	base := waitFlow("the start", warm)
	t.Logf("load flowing: %+v", base)

	// moreLoad waits until n more rounds of load are acknowledged.
	moreLoad := func(n int) {
		o0, _, _ := l.acknowledged()
		require.Eventually(t, func() bool { o, _, _ := l.acknowledged(); return o >= o0+n }, 2*time.Minute, 100*time.Millisecond,
			"load is acknowledged")
	}
	type faultResult struct {
		fault    string
		down     time.Duration // from the kill until the process answered again (restarts)
		flow     flow          // until the first work acknowledged after the fault was done
		caughtUp time.Duration // until all the work acknowledged (timers: due) before the fault was done
		worst    time.Duration // the longest any item acknowledged (due) within 10 s of the fault took
	}
	var results []faultResult
	// measure waits until every item acknowledged (timers: due) up to 10 s after t0 is done, and
	// reports the longest any of them from 10 s before t0 on took.
	const window = 10 * time.Second
	measure := func(what string, t0 time.Time) (time.Duration, string) {
		var (
			d     time.Duration
			which string
		)
		require.Eventually(t, func() bool {
			var ok bool
			d, which, ok = l.worst(t0.Add(-window), t0.Add(window))
			return ok && time.Now().After(t0.Add(window))
		}, 4*time.Minute, 100*time.Millisecond, "the work acknowledged around %s is done", what)
		return d, which
	}
	// fault injects one fault under load, measures, runs after (the restart of a process left
	// down while it was measured), and lets the load run on before the next one.
	fault := func(name string, inject func() time.Duration, after func()) {
		t.Logf("fault: %s", name)
		t0 := time.Now()
		down := inject()
		f := waitFlow(name, t0)
		var (
			cu   time.Duration
			last string
		)
		require.Eventually(t, func() bool {
			var ok bool
			cu, last, ok = l.caughtUp(t0)
			return ok
		}, 4*time.Minute, 100*time.Millisecond, "the work acknowledged before %s is done", name)
		worst, which := measure(name, t0)
		if after != nil {
			after()
		}
		results = append(results, faultResult{name, down, f, cu, worst})
		t.Logf("fault %q: down %s; work flowed again after: outbox %s, tasks %s, timers %s, schedule %s; caught up after %s (%s); longest item %s (%s)",
			name, down.Round(time.Millisecond), f.Outbox.Round(time.Millisecond), f.Tasks.Round(time.Millisecond),
			f.Timers.Round(time.Millisecond), f.Schedule.Round(time.Millisecond), cu.Round(time.Millisecond), last,
			worst.Round(time.Millisecond), which)
		moreLoad(25)
	}
	restart := func(p *Proc) time.Duration {
		t0 := time.Now()
		require.NoError(t, p.Kill())
		require.NoError(t, c.Restart(ctx, p), "%s restarts", p.Name)
		return time.Since(t0)
	}
	moreLoad(25)
	calm, which := measure("no fault", time.Now())
	t.Logf("without a fault the longest item took %s (%s)", calm.Round(time.Millisecond), which)

	// One worker dies; the other carries on, and it is back once the work has caught up.
	fault("SIGKILL courier-worker-1", func() time.Duration {
		require.NoError(t, c.Workers[0].Kill())
		return 0
	}, func() { require.NoError(t, c.Restart(ctx, c.Workers[0])) })
	// One gateway dies; requests and results go to the other until it is back.
	fault("SIGKILL courier-gateway-1", func() time.Duration {
		require.NoError(t, c.Gateways[0].Kill())
		return 0
	}, func() { require.NoError(t, c.Restart(ctx, c.Gateways[0])) })
	fault("SIGKILL temporal-history, restart", func() time.Duration { return restart(c.Temporal["history"]) }, nil)
	fault("SIGKILL temporal-matching, restart", func() time.Duration { return restart(c.Temporal["matching"]) }, nil)
	fault("restart courier's PostgreSQL (immediate shutdown)", func() time.Duration {
		t0 := time.Now()
		require.NoError(t, c.AppDB.Restart(ctx))
		return time.Since(t0)
	}, nil)

	close(stopLoad)
	<-loadDone
	lastLoad := time.Now()
	nOutbox, nTimers, nTasks := l.acknowledged()
	t.Logf("acknowledged: %d records, %d timers (%d cancelled), %d tasks", nOutbox, nTimers, len(l.cancelled), nTasks)

	var missing []int64
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		missing = missing[:0]
		for id := range l.outboxAck {
			if _, ok := l.arrived[id]; !ok {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	}, 3*time.Minute, 200*time.Millisecond, "every acknowledged record reaches the stream (missing %v)", missing)

	var notFired []string
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		notFired = notFired[:0]
		for id := range l.timerAck {
			if _, ok := l.fired[id]; !ok {
				notFired = append(notFired, id)
			}
		}
		return len(notFired) == 0
	}, 3*time.Minute, 200*time.Millisecond, "every acknowledged timer fires (not yet: %v)", notFired)

	var notDone []string
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		notDone = notDone[:0]
		for id := range l.taskAck {
			if _, ok := l.succeeded[id]; !ok {
				notDone = append(notDone, id)
			}
		}
		return len(notDone) == 0
	}, 4*time.Minute, 200*time.Millisecond, "every acknowledged task succeeds (not yet: %v)", notDone)

	// The cancelled timers were due 20 s after they were armed: wait until the last of them is
	// past due (the schedule's ticks are the clock), then none of them may have fired.
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.ticks) > 0 && l.ticks[len(l.ticks)-1].After(lastLoad.Add(21*time.Second))
	}, 2*time.Minute, 200*time.Millisecond, "the schedule keeps firing after the load")

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.early, "no timer fires before its time")
	var firedCancelled []string
	for id := range l.cancelled {
		if _, ok := l.fired[id]; ok {
			firedCancelled = append(firedCancelled, id)
		}
	}
	require.Empty(t, firedCancelled, "no timer whose cancel was acknowledged fires")
	var twice []string
	for id, attempts := range l.success {
		if len(attempts) != 1 {
			twice = append(twice, id)
		}
	}
	require.Empty(t, twice, "each task's success is accepted for exactly one attempt")
	require.Empty(t, l.latepush, "no task is pushed again after its success")
	require.LessOrEqual(t, l.maxWork, queueLimit, "the worker never holds more tasks than the queue's limit")
	var q struct {
		InFlight int `json:"in_flight"`
	}
	require.Equal(t, 200, a.do(ctx, 0, "GET", "/v1/queues/cluster", nil, &q))
	require.Zero(t, q.InFlight, "no slot stays taken")
	repushed := 0
	for _, n := range l.pushes {
		if n > 1 {
			repushed++
		}
	}
	maxGap := time.Duration(0)
	for i := 1; i < len(l.ticks); i++ {
		maxGap = max(maxGap, l.ticks[i].Sub(l.ticks[i-1]))
	}
	require.Less(t, maxGap, time.Minute, "the schedule never skips past its catch-up window")

	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | process back after | outbox | tasks | timers | schedule | caught up | longest item |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| none | — | — | — | — | — | — | %.1fs |\n", calm.Seconds())
	for _, r := range results {
		down := "—"
		if r.down > 0 {
			down = fmt.Sprintf("%.1fs", r.down.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %s | %.1fs | %.1fs | %.1fs | %.1fs | %.1fs | %.1fs |\n", r.fault, down, r.flow.Outbox.Seconds(), r.flow.Tasks.Seconds(),
			r.flow.Timers.Seconds(), r.flow.Schedule.Seconds(), r.caughtUp.Seconds(), r.worst.Seconds())
	}
	t.Logf("from each fault until the first work of each kind acknowledged (timers: due) after it was done, until all work acknowledged (due) before it was, and the longest any item acknowledged (due) within 10 s of it took:%s", b.String())
	t.Logf("records %d (duplicates in the stream %d), timers %d fired (%d cancelled, none fired), tasks %d (pushed more than once %d), most tasks at the worker %d of %d, schedule ticks %d (longest gap %s); whole test %s",
		nOutbox, l.dupes, len(l.fired), len(l.cancelled), nTasks, repushed, l.maxWork, queueLimit, len(l.ticks), maxGap.Round(time.Millisecond),
		time.Since(began).Round(time.Second))
}

// operatorsSeeFailures makes a dead record (a topic no stream captures), a failed task (a
// queue allowing one attempt, whose worker reports a failure) and a failed timer (a callback
// answering 410), then finds each listed as Failed with its reason through the Temporal API
// (ExecutionStatus = "Failed") and through the UI server's API, which also lists courier's
// search attributes in the namespace.
func operatorsSeeFailures(t *testing.T, c *Cluster, a *api) {
	ctx := t.Context()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var push struct {
			Attempt   int    `json:"attempt"`
			ResultURL string `json:"result_url"`
		}
		_ = json.NewDecoder(r.Body).Decode(&push)
		w.WriteHeader(http.StatusAccepted)
		go func() {
			u, _ := url.Parse(push.ResultURL)
			a.do(context.WithoutCancel(ctx), 0, "POST", u.Path, map[string]any{"attempt": push.Attempt, "status": "failure",
				"status_code": 422, "message": "unparseable pdf"}, nil)
		}()
	}))
	t.Cleanup(failing.Close)
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	t.Cleanup(gone.Close)

	var rec struct {
		ID int64 `json:"id"`
	}
	require.Equal(t, 201, a.do(ctx, 1, "POST", "/v1/outbox", map[string]any{"topic": "orders.created", "payload": map[string]int{"order": 42}}, &rec))
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/queues/docparse", map[string]any{"push_url": failing.URL, "retry": map[string]any{"max_attempts": 1}}, nil))
	require.Equal(t, 201, a.do(ctx, 1, "POST", "/v1/tasks", map[string]any{"task_id": "doc-42", "task_version": 1, "queue": "docparse"}, nil))
	require.Equal(t, 201, a.do(ctx, 0, "PUT", "/v1/biz-types/order.close", map[string]any{"delivery": "http", "callback_url": gone.URL,
		"retry": map[string]any{"max_attempts": 1}}, nil))
	require.Equal(t, 201, a.do(ctx, 1, "POST", "/v1/timers", map[string]any{"biz_type": "order.close", "biz_id": "o-41", "delay": "0s"}, nil))

	want := map[string]struct{ errType, reason string }{
		courier.OutboxWorkflowID(courier.DefaultSource, rec.ID): {workflows.ErrTypeOutboxDead, "orders.created"},
		"task/doc-42/1": {workflows.ErrTypeTaskFailed, "unparseable pdf"},
		courier.TimerWorkflowID("order.close", "o-41"): {workflows.ErrTypeTimerFailed, "410"},
	}
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: c.Frontend(), Namespace: c.Namespace(), Logger: quietSDKLogger()})
	require.NoError(t, err)
	defer tc.Close()
	const failed = `ExecutionStatus = "Failed"`
	listed := map[string]bool{}
	require.Eventually(t, func() bool {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: c.Namespace(), Query: failed})
		if err != nil {
			return false
		}
		for _, e := range resp.GetExecutions() {
			listed[e.GetExecution().GetWorkflowId()] = e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
		}
		for id := range want {
			if !listed[id] {
				return false
			}
		}
		return true
	}, 2*time.Minute, 200*time.Millisecond, "the dead record, the failed task and the failed timer are listed as Failed (listed: %v)", listed)
	for id, w := range want {
		err := tc.GetWorkflow(ctx, id, "").Get(ctx, nil)
		var app *temporal.ApplicationError
		require.ErrorAs(t, err, &app, id)
		require.Equal(t, w.errType, app.Type(), id)
		require.Contains(t, app.Message(), w.reason, "%s fails with its reason", id)
	}

	// The same through the UI server, as the browser asks it.
	var sas struct {
		CustomAttributes map[string]string `json:"customAttributes"`
	}
	getJSON(t, c.UIURL()+"/api/v1/namespaces/"+c.Namespace()+"/search-attributes", &sas)
	for name := range courier.SearchAttributes {
		require.Contains(t, sas.CustomAttributes, name, "the UI's namespace has courier's search attribute %s", name)
	}
	var list struct {
		Executions []struct {
			Execution struct {
				WorkflowID string `json:"workflowId"`
			} `json:"execution"`
			Status string `json:"status"`
		} `json:"executions"`
	}
	getJSON(t, c.UIURL()+"/api/v1/namespaces/"+c.Namespace()+"/workflows?query="+url.QueryEscape(failed), &list)
	inUI := map[string]string{}
	for _, e := range list.Executions {
		inUI[e.Execution.WorkflowID] = e.Status
	}
	for id := range want {
		require.Equal(t, "WORKFLOW_EXECUTION_STATUS_FAILED", inUI[id], "the UI lists %s as Failed", id)
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	t.Logf("the UI lists as Failed: %s (%s/namespaces/%s/workflows?query=%s)", strings.Join(ids, ", "), c.UIURL(), c.Namespace(), url.QueryEscape(failed))
}

func getJSON(t *testing.T, u string, out any) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode, u)
	require.NoError(t, json.NewDecoder(bufio.NewReader(resp.Body)).Decode(out), u)
}
