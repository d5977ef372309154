package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq" // the test reads the private server's rows
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/internal/cluster"
	"github.com/courier-oss/courier/webhook"
)

// The fault test of the batched dispatch mode (issue 34, docs/tasks.md "Faults in the batched
// mode"): 2,000 tasks on a batched queue limited to 50, a real HTTP worker that holds each
// task 20 ms, two courier nodes (a worker and a gateway process each) on a private PostgreSQL,
// Temporal in this process. Mid-load, node 1 is SIGKILLed in the middle of its pushes and
// started again, the queue switches from single pushes to batched pushes of 10, node 2 is
// SIGKILLed likewise, then PostgreSQL is restarted in immediate mode. In the end every task is
// Success exactly once in its row, the worker never held more than the limit, nothing stays
// Processing and no slot stays taken, no attempt was lost (each task's attempts reached the
// worker, none skipped), and every push of one attempt carried the same webhook-id.
func TestBatchedQueueUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Temporal, PostgreSQL and four courier processes")
	}
	const (
		total = 2000
		limit = 50
		hold  = 20 * time.Millisecond
		queue = "faults"
	)
	ctx := t.Context()
	began := time.Now()
	pg := startFaultPostgres(t)
	_, err := pg.CreateDatabase(ctx, "courier")
	require.NoError(t, err)
	dsn := pg.URL("courier")
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })

	// Temporal lives in this process: the faults are courier's and its database's, not the
	// engine's.
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	env := []string{"DATABASE_URL=" + dsn, "TEMPORAL_ADDRESS=" + tmp.Address(), "TEMPORAL_NAMESPACE=" + tmp.Namespace(),
		"NATS_URL=" + ns.URL(), "COURIER_ALLOW_LOOPBACK=true", "COURIER_LOG_LEVEL=warn"}
	out, err := courierCmd(t, env, "migrate").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = courierCmd(t, env, "apikey", "create", "--name", "faults", "--scopes", "admin").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var key string
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "key:"); ok {
			key = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, key)

	// Two nodes; each worker's pushes name its own gateway in their result links.
	var nodes []*faultNode
	var gateways []string
	for i := 1; i <= 2; i++ {
		gw, wk := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
		n := &faultNode{name: fmt.Sprintf("node %d", i), gatewayURL: "http://" + gw, workerURL: "http://" + wk}
		n.gateway = newCourierProc(t, fmt.Sprintf("gateway-%d", i), append(slices.Clone(env), "COURIER_HTTP_ADDR="+gw), "gateway")
		n.worker = newCourierProc(t, fmt.Sprintf("worker-%d", i), append(slices.Clone(env), "COURIER_HTTP_ADDR="+wk,
			"COURIER_PUBLIC_URL="+n.gatewayURL), "worker")
		nodes = append(nodes, n)
		gateways = append(gateways, n.gatewayURL)
	}
	for _, n := range nodes {
		n.start(t)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range nodes {
				n.worker.printTail(t)
				n.gateway.printTail(t)
			}
		}
	})

	secret := "whsec_" + strings.Repeat("Zm9ydHl0d28", 4)
	verifier, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	w := newFaultWorker(t, verifier, gateways, key, hold)

	// The tasks wait while the queue has no push_url; giving it one starts the load.
	queueConfig := func(pushURL string, pushBatchSize int) api.QueueConfig {
		return api.QueueConfig{PushURL: pushURL, Secrets: []string{secret}, ConcurrencyLimit: limit,
			ProcessingTimeout: api.PositiveDuration(time.Minute), DispatchMode: courier.DispatchBatched, PushBatchSize: pushBatchSize,
			Retry: api.Retry{MaxAttempts: 5, InitialInterval: api.PositiveDuration(time.Second)}}
	}
	require.Equal(t, 201, httpJSON(t, "PUT", gateways[0]+"/v1/queues/"+queue, key, queueConfig("", 1), nil))
	insertFaultTasks(t, gateways, key, queue, total)
	w.start()
	require.Equal(t, 200, httpJSON(t, "PUT", gateways[1]+"/v1/queues/"+queue, key, queueConfig(w.url, 1), nil))
	t.Logf("%5.1fs: %d tasks inserted, queue %q given its push_url", time.Since(began).Seconds(), total, queue)

	// The faults, each once enough tasks have succeeded and while many remain.
	snapshot := func() string {
		var processing, unpushed int
		_ = db.QueryRowContext(ctx, "SELECT count(*), count(*) FILTER (WHERE pushed_at IS NULL) FROM courier_tasks WHERE queue = $1 AND status = 'processing'",
			queue).Scan(&processing, &unpushed)
		return fmt.Sprintf("%d in Processing (%d not pushed yet)", processing, unpushed)
	}
	type fault struct {
		name string
		at   int
		node *faultNode // a node to kill in the middle of its pushes; nil: restart PostgreSQL
	}
	faults := []fault{
		{name: "SIGKILL node 1 (worker and gateway)", at: 300, node: nodes[0]},
		{name: "SIGKILL node 2 (worker and gateway)", at: 800, node: nodes[1]},
		{name: "PostgreSQL restarted in immediate mode", at: 1300},
	}
	// The load's progress, for the log: tasks succeeded every second.
	var progress []string
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				n := w.succeeded()
				progress = append(progress, fmt.Sprintf("%.0fs:%d", time.Since(began).Seconds(), n))
				if n == total {
					return
				}
			case <-w.stop:
				return
			}
		}
	}()
	for i, f := range faults {
		if i == 1 {
			// The rest goes out in batched pushes, 10 attempts a request, so the second kill and
			// the restart meet them, and the runs the first kill left (claimed with single
			// pushes) are repeated after the switch.
			require.Equal(t, 200, httpJSON(t, "PUT", gateways[1]+"/v1/queues/"+queue, key, queueConfig(w.url, 10), nil))
			t.Logf("%5.1fs: the queue pushes 10 attempts a request from now on", time.Since(began).Seconds())
		}
		require.Eventually(t, func() bool { return w.succeeded() >= f.at }, 3*time.Minute, 10*time.Millisecond,
			"%d tasks succeed before %q", f.at, f.name)
		var state string
		if f.node != nil {
			// The kill lands while the node's batch runs are pushing: the worker holds the
			// answers to that node's pushes (for up to 300 ms, or 10 of them) until the node is
			// dead, so its runs have pushes out and have not finished, and its claimer claims
			// meanwhile.
			tr := w.arm(f.node.gatewayURL)
			select {
			case <-tr.hit:
			case <-time.After(3 * time.Minute):
				t.Fatalf("%s pushed nothing for 3 minutes", f.node.name)
			}
			state = snapshot()
			f.node.kill()
			w.disarm(tr)
		} else {
			state = snapshot()
			restart := time.Now()
			require.NoError(t, pg.Restart(ctx))
			state += fmt.Sprintf("; it accepted connections again after %s", time.Since(restart).Round(time.Millisecond))
		}
		done := w.succeeded()
		require.Less(t, done, total, "the fault %q lands mid-load", f.name)
		faultAt := time.Now()
		t.Logf("%5.1fs: %s with %d of %d tasks succeeded, %s", time.Since(began).Seconds(), f.name, done, total, state)
		if f.node != nil {
			f.node.start(t)
			t.Logf("%5.1fs: %s answers again after %s", time.Since(began).Seconds(), f.node.name, time.Since(faultAt).Round(time.Millisecond))
		}
	}

	// Every task ends Success, in the rows.
	var counts map[string]int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		counts = map[string]int{}
		rows, err := db.QueryContext(ctx, "SELECT status, count(*) FROM courier_tasks WHERE queue = $1 GROUP BY status", queue)
		if !assert.NoError(c, err) {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			var n int
			if !assert.NoError(c, rows.Scan(&s, &n)) {
				return
			}
			counts[s] = n
		}
		assert.NoError(c, rows.Err())
		assert.Equal(c, map[string]int{"success": total}, counts, "every task ends Success (tasks by status)")
	}, 4*time.Minute, 200*time.Millisecond)
	loadTook := time.Since(began)
	// Nothing stays Processing and no slot stays taken: the count and the holds of answers a
	// killed gateway never wrote come back (SlotHoldGrace, then a claimer's recovery pass).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var inFlight, holds int
		if assert.NoError(c, db.QueryRowContext(ctx, "SELECT in_flight, (SELECT count(*) FROM courier_task_slot_holds) FROM courier_task_queues WHERE name = $1",
			queue).Scan(&inFlight, &holds)) {
			assert.Zero(c, inFlight, "no slot stays taken (the queue's in_flight)")
			assert.Zero(c, holds, "no slot stays held for an answer")
		}
	}, 2*time.Minute, 200*time.Millisecond)

	// The rows against what the worker saw.
	type row struct {
		attempt  int
		status   string
		pushedAt time.Time
	}
	rows := map[string]row{}
	rs, err := db.QueryContext(ctx, "SELECT task_id, attempt - attempt_base, status, pushed_at FROM courier_tasks WHERE queue = $1", queue)
	require.NoError(t, err)
	for rs.Next() {
		var id string
		var r row
		require.NoError(t, rs.Scan(&id, &r.attempt, &r.status, &r.pushedAt))
		rows[id] = r
	}
	require.NoError(t, rs.Err())
	rs.Close()
	require.Len(t, rows, total, "one row per task")
	w.stopAll()
	<-sampled
	t.Logf("tasks succeeded by then: %s", strings.Join(progress, " "))

	w.mu.Lock()
	defer w.mu.Unlock()
	var (
		twice, lost, badIDs []string
		repushed, repushes  int
		retried             int
		afterSuccess        int
		late                int
	)
	perTask := map[string][]int{}
	for k, a := range w.attempts {
		perTask[k.taskID] = append(perTask[k.taskID], k.attempt)
		if a.pushes > 1 {
			repushed++
			repushes += a.pushes - 1
		}
		// A single push's webhook-id is its attempt's delivery id; a batched push's is its
		// request's, the same on every push of the attempt.
		want := courier.TaskAttemptDeliveryID(k.taskID, k.version, k.attempt)
		if len(a.webhookIDs) != 1 || (!a.batched && a.webhookIDs[want] != a.pushes) {
			badIDs = append(badIDs, fmt.Sprintf("%s attempt %d: %v", k.taskID, k.attempt, a.webhookIDs))
		}
		afterSuccess += a.pushesAfterSuccess
	}
	for id, r := range rows {
		// Success exactly once: one attempt's success accepted, by one 202 (or, its answer lost
		// with a killed gateway, by the 409 of its repeat that finds it recorded).
		if w.accepted[id] > 1 || w.accepted[id]+w.recorded[id] == 0 {
			twice = append(twice, fmt.Sprintf("%s: %d accepted, %d found recorded", id, w.accepted[id], w.recorded[id]))
		}
		// No attempt lost: the attempts the row counts are exactly the ones the worker was
		// pushed, 1 to n, and the success is the last one's.
		got := perTask[id]
		sort.Ints(got)
		want := make([]int, r.attempt)
		for i := range want {
			want[i] = i + 1
		}
		if !slices.Equal(got, want) || w.successAttempt[id] != r.attempt {
			lost = append(lost, fmt.Sprintf("%s: row at attempt %d (%s), worker pushed %v, success of attempt %d", id, r.attempt, r.status, got, w.successAttempt[id]))
		}
		if r.attempt > 1 {
			retried++
		}
		// An attempt marked pushed by a run that was killed before it sent it is sent by the
		// run's repeat on the other node, its pushed_at (and deadline) kept.
		if a := w.attempts[attemptKey{id, 1, r.attempt}]; a != nil && a.firstAt.Sub(r.pushedAt) > 2*time.Second {
			late++
		}
	}
	t.Logf("load done in %.1fs (whole test %.1fs): rows %v; worker: most held at once %d of %d, attempts pushed %d "+
		"(%d single pushes, %d batched pushes), "+
		"attempts first pushed by the repeat of a killed node's batch run %d, "+
		"re-pushes of an attempt %d (of %d attempts; every one with the attempt's webhook-id), pushes after the attempt's success %d, "+
		"tasks needing more than one attempt %d, results answered 202 %d, found recorded (409 after a lost answer) %d, result calls that met a dead gateway %d, 5xx answers %d",
		loadTook.Seconds(), time.Since(began).Seconds(), counts, w.maxHeld, limit, len(w.attempts), w.singlePushes, w.batchedPushes, late, repushes, repushed, afterSuccess, retried,
		w.sum(w.accepted), w.sum(w.recorded), w.unreachable, w.unavailable)
	require.Empty(t, w.problems, "the worker saw nothing wrong (bad signatures, unknown answers)")
	require.LessOrEqual(t, w.maxHeld, limit, "the worker never holds more tasks than the queue's limit")
	require.Empty(t, twice, "every task's success is accepted exactly once")
	require.Empty(t, lost, "no attempt is lost")
	require.Empty(t, badIDs, "every push of an attempt carries that attempt's webhook-id")
}

// startFaultPostgres starts a private PostgreSQL server for the test (never the machine's
// shared one: the test restarts it), stopped when the test ends. Without PostgreSQL's server
// binaries or the postgres user the test is skipped, except in CI, where it fails.
func startFaultPostgres(t *testing.T) *cluster.Postgres {
	t.Helper()
	dir := t.TempDir()
	// As root the server runs as the postgres user, which must reach its directory: the test's
	// temporary directories are private to their owner.
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	pg, err := cluster.StartPrivatePostgres(t.Context(), filepath.Join(dir, "pg"), "courier-faults")
	if errors.Is(err, cluster.ErrPrerequisite) && os.Getenv("CI") == "" {
		t.Skipf("skipping: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { pg.Proc.Stop(time.Minute) })
	return pg
}

// insertFaultTasks inserts total tasks on queue through the gateways, a few requests at once,
// over the five priorities.
func insertFaultTasks(t *testing.T, gateways []string, key, queue string, total int) {
	t.Helper()
	ids := make(chan int)
	var wg sync.WaitGroup
	failed := make(chan string, total)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 30 * time.Second}
			for i := range ids {
				b, _ := json.Marshal(map[string]any{"task_id": faultTaskID(i), "task_version": 1, "priority": 1 + i%5, "queue": queue,
					"payload": map[string]int{"i": i}})
				req, _ := http.NewRequest("POST", gateways[g%len(gateways)]+"/v1/tasks", bytes.NewReader(b))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					failed <- err.Error()
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					failed <- fmt.Sprintf("task %d: %s", i, resp.Status)
				}
			}
		}()
	}
	for i := range total {
		ids <- i
	}
	close(ids)
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Errorf("insert: %s", f)
	}
	require.False(t, t.Failed())
}

func faultTaskID(i int) string { return fmt.Sprintf("f-%04d", i) }

// faultNode is one machine of the test: a courier worker and a courier gateway, killed and
// started again together.
type faultNode struct {
	name                  string
	worker, gateway       *courierProc
	workerURL, gatewayURL string
}

// start starts both processes and waits until they answer.
func (n *faultNode) start(t *testing.T) {
	t.Helper()
	n.worker.start()
	n.gateway.start()
	n.worker.waitAnswers(t, n.workerURL+"/healthz")
	n.gateway.waitAnswers(t, n.gatewayURL+"/readyz")
}

// kill SIGKILLs both processes and waits until they have exited.
func (n *faultNode) kill() {
	n.worker.kill()
	n.gateway.kill()
}

// courierProc is a courier subprocess (this test binary as courier) that can be killed and
// started again with the same arguments and environment; its output is kept across runs.
type courierProc struct {
	t    *testing.T
	name string
	env  []string
	args []string
	out  *syncBuffer

	cmd  *exec.Cmd
	done chan error // holds the exit once it happened (put back by whoever reads it)
}

func newCourierProc(t *testing.T, name string, env []string, args ...string) *courierProc {
	p := &courierProc{t: t, name: name, env: env, args: args, out: &syncBuffer{}}
	t.Cleanup(func() {
		if p.cmd != nil {
			p.kill()
		}
	})
	return p
}

func (p *courierProc) start() {
	cmd := courierCmd(p.t, p.env, p.args...)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Killed with the test binary, should it die first (a test timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(p.out, "--- %s: start\n", p.name)
	require.NoError(p.t, cmd.Start())
	p.cmd, p.done = cmd, make(chan error, 1)
	go func() { p.done <- cmd.Wait() }()
}

// kill sends SIGKILL and waits until the process has exited.
func (p *courierProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	err := <-p.done
	p.done <- err
	fmt.Fprintf(p.out, "--- %s: killed\n", p.name)
}

// waitAnswers waits until url answers 200, failing at once if the process exits.
func (p *courierProc) waitAnswers(t *testing.T, url string) {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	var exited error
	require.Eventually(t, func() bool {
		select {
		case err := <-p.done:
			p.done <- err
			exited = fmt.Errorf("exited: %v", err)
			return true
		default:
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 2*time.Minute, 50*time.Millisecond, "%s answers %s", p.name, url)
	if exited != nil {
		t.Fatalf("%s %v\n%s", p.name, exited, p.out)
	}
}

// printTail logs the last lines of the process's output.
func (p *courierProc) printTail(t *testing.T) {
	lines := strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("--- %s (last %d lines)\n%s", p.name, len(lines), strings.Join(lines, "\n"))
}

// attemptKey names one attempt of one task version.
type attemptKey struct {
	taskID  string
	version int64
	attempt int
}

// attemptSeen is what the worker saw of one attempt.
type attemptSeen struct {
	pushes             int
	webhookIDs         map[string]int // webhook-id → pushes that carried it
	held               bool           // from the first push until its result was answered
	pushesAfterSuccess int            // pushes that came after its success was accepted
	succeeded          bool
	firstAt            time.Time // the first push's arrival
	batched            bool      // first pushed in a batched push
}

// faultWorker is the task worker of the fault test: it takes single pushes, verifies their
// signatures, holds each attempt for its work and then until its result is answered, reporting
// half the tasks' results one at a time and the other half many to a request. It reaches the
// gateways as a load balancer in front of them would: a gateway that does not answer is
// skipped for the other one.
type faultWorker struct {
	t        *testing.T
	verifier *webhook.Verifier
	gateways []string
	key      string
	work     time.Duration
	hc       *http.Client
	url      string
	stop     chan struct{}
	wg       sync.WaitGroup
	batch    chan faultResult
	batchSem chan struct{}

	mu             sync.Mutex
	trigger        *pushTrigger
	attempts       map[attemptKey]*attemptSeen
	held, maxHeld  int
	accepted       map[string]int // task id → its success answered 202
	recorded       map[string]int // task id → its success answered 409 "success" (an answer lost before)
	successAttempt map[string]int // task id → the attempt whose success was accepted
	singlePushes   int            // requests carrying one attempt
	batchedPushes  int            // requests carrying a batch (api.TaskPushBatch)
	unreachable    int            // result calls that reached no gateway at the first try
	unavailable    int            // 5xx answers to results
	problems       []string
}

// pushTrigger holds the answers to one node's pushes until the test releases them, and tells
// the test when it holds pushTriggerHeld of them or pushTriggerWait has passed since the first.
type pushTrigger struct {
	gateway string // the node's pushes carry links to its gateway
	hit     chan struct{}
	release chan struct{}
	held    int // under the worker's mu
	once    sync.Once
}

const (
	pushTriggerHeld = 10
	pushTriggerWait = 300 * time.Millisecond
)

func (tr *pushTrigger) fire() { tr.once.Do(func() { close(tr.hit) }) }

// arm returns a trigger on the next push from the node whose gateway is gatewayURL.
func (w *faultWorker) arm(gatewayURL string) *pushTrigger {
	tr := &pushTrigger{gateway: gatewayURL, hit: make(chan struct{}), release: make(chan struct{})}
	w.mu.Lock()
	w.trigger = tr
	w.mu.Unlock()
	return tr
}

// disarm answers the pushes tr held and lets the next ones through.
func (w *faultWorker) disarm(tr *pushTrigger) {
	w.mu.Lock()
	w.trigger = nil
	w.mu.Unlock()
	close(tr.release)
}

// faultResult is an attempt's success waiting to be reported in a batch.
type faultResult struct {
	key        attemptKey
	resultsURL string
}

func newFaultWorker(t *testing.T, v *webhook.Verifier, gateways []string, key string, work time.Duration) *faultWorker {
	w := &faultWorker{t: t, verifier: v, gateways: gateways, key: key, work: work, hc: &http.Client{Timeout: 15 * time.Second},
		stop: make(chan struct{}), batch: make(chan faultResult, 4096), batchSem: make(chan struct{}, 4),
		attempts: map[attemptKey]*attemptSeen{}, accepted: map[string]int{}, recorded: map[string]int{}, successAttempt: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(w.push))
	w.url = srv.URL
	t.Cleanup(func() { w.stopAll(); srv.Close() })
	return w
}

// start runs the batch reporter.
func (w *faultWorker) start() {
	w.wg.Add(1)
	go w.reportBatches()
}

// stopAll ends every report loop and waits for them; calling it again does nothing more.
func (w *faultWorker) stopAll() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

func (w *faultWorker) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// succeeded counts the tasks whose success courier has accepted.
func (w *faultWorker) succeeded() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.successAttempt)
}

func (w *faultWorker) sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// push takes a single push (api.TaskPush) or a batched one (api.TaskPushBatch), every attempt
// it carries: a repeat of an attempt it has (the same webhook-id, as a worker deduplicates) is
// answered 2xx and not worked again.
func (w *faultWorker) push(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	// A repeat signed in the same second is the same message: authentic, and a duplicate.
	if err := w.verifier.Verify(body, r.Header); err != nil && !errors.Is(err, webhook.ErrReplay) {
		w.problem("push refused: %v", err)
		http.Error(rw, err.Error(), http.StatusUnauthorized)
		return
	}
	var (
		b       api.TaskPushBatch
		single  api.TaskPush
		batched bool
	)
	if json.Unmarshal(body, &b) == nil && len(b.Tasks) > 0 {
		batched = true
	} else if err := json.Unmarshal(body, &single); err == nil && single.TaskID != "" {
		b = api.TaskPushBatch{Tasks: []api.TaskPush{single}, ResultsURL: single.ResultsURL}
	} else {
		w.problem("push neither single nor batched: %s", body)
		http.Error(rw, "bad push", http.StatusBadRequest)
		return
	}
	id := r.Header.Get(webhook.HeaderID)
	var fresh []api.TaskPush
	w.mu.Lock()
	if batched {
		w.batchedPushes++
	} else {
		w.singlePushes++
	}
	for _, p := range b.Tasks {
		k := attemptKey{p.TaskID, p.TaskVersion, p.Attempt}
		if p.DeliveryID != courier.TaskAttemptDeliveryID(k.taskID, k.version, k.attempt) {
			w.problems = append(w.problems, fmt.Sprintf("%s attempt %d pushed with delivery id %q", k.taskID, k.attempt, p.DeliveryID))
		}
		a := w.attempts[k]
		if a == nil {
			a = &attemptSeen{webhookIDs: map[string]int{}, held: true, firstAt: time.Now(), batched: batched}
			w.attempts[k] = a
			w.held++
			w.maxHeld = max(w.maxHeld, w.held)
			fresh = append(fresh, p)
		}
		a.pushes++
		a.webhookIDs[id]++
		if a.succeeded {
			a.pushesAfterSuccess++
		}
	}
	tr := w.trigger
	if tr != nil && strings.HasPrefix(b.Tasks[0].ResultURL, tr.gateway) {
		if tr.held++; tr.held == 1 {
			time.AfterFunc(pushTriggerWait, tr.fire)
		}
		if tr.held >= pushTriggerHeld {
			tr.fire()
		}
	} else {
		tr = nil
	}
	w.mu.Unlock()
	if tr != nil {
		select {
		case <-tr.release:
		case <-w.stop:
		}
	}
	if batched {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(api.TaskPushBatchAnswer{})
	} else {
		rw.WriteHeader(http.StatusAccepted)
	}
	for _, p := range fresh {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			select { // the work itself: the task stays at the worker this long
			case <-time.After(w.work):
			case <-w.stop:
				return
			}
			k := attemptKey{p.TaskID, p.TaskVersion, p.Attempt}
			i := 0
			_, _ = fmt.Sscanf(p.TaskID, "f-%d", &i)
			if i%2 == 1 {
				w.batch <- faultResult{key: k, resultsURL: p.ResultsURL}
				return
			}
			w.reportOne(k, p.ResultURL)
		}()
	}
}

// done lets an attempt go once its result was answered: 202 (accepted) or 409, whose status
// says whether it found this success recorded (its first answer lost) or the attempt over.
func (w *faultWorker) done(k attemptKey, status int, errBody *api.ErrorDetail) {
	w.mu.Lock()
	defer w.mu.Unlock()
	a := w.attempts[k]
	if a.held {
		a.held = false
		w.held--
	}
	switch {
	case status == http.StatusAccepted:
		w.accepted[k.taskID]++
	case status == http.StatusConflict && errBody != nil && errBody.Details["status"] == string(courier.TaskSuccess):
		w.recorded[k.taskID]++
	default:
		// An attempt courier ended otherwise (a timeout) is not a problem by itself: the
		// checks of the rows find whether it was recorded.
		if status != http.StatusConflict {
			w.problems = append(w.problems, fmt.Sprintf("result of %s attempt %d answered %d %+v", k.taskID, k.attempt, status, errBody))
		}
		return
	}
	a.succeeded = true
	if _, ok := w.successAttempt[k.taskID]; !ok || status == http.StatusAccepted {
		w.successAttempt[k.taskID] = k.attempt
	}
}

// reportOne posts one attempt's success to its result link until it is answered.
func (w *faultWorker) reportOne(k attemptKey, resultURL string) {
	body, _ := json.Marshal(api.TaskResult{Attempt: k.attempt, Status: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`{"ok":true}`)})
	status, answer, ok := w.post(resultURL, body)
	if !ok {
		return
	}
	var e api.ErrorBody
	_ = json.Unmarshal(answer, &e)
	w.done(k, status, &e.Error)
}

// reportBatches sends the successes waiting in w.batch, up to 100 to a request, a few
// requests at once.
func (w *faultWorker) reportBatches() {
	defer w.wg.Done()
	for {
		var items []faultResult
		select {
		case it := <-w.batch:
			items = append(items, it)
		case <-w.stop:
			return
		}
	gather:
		for len(items) < 100 {
			select {
			case it := <-w.batch:
				items = append(items, it)
			default:
				break gather
			}
		}
		select {
		case w.batchSem <- struct{}{}:
		case <-w.stop:
			return
		}
		w.wg.Add(1)
		go func() {
			defer func() { <-w.batchSem; w.wg.Done() }()
			w.reportMany(items)
		}()
	}
}

// reportMany posts successes to POST /v1/tasks/results until each one is answered; the ones
// answered 503 are sent again.
func (w *faultWorker) reportMany(items []faultResult) {
	for len(items) > 0 {
		req := api.TaskResults{Results: make([]api.TaskResultItem, len(items))}
		for i, it := range items {
			req.Results[i] = api.TaskResultItem{TaskID: it.key.taskID, TaskVersion: it.key.version,
				TaskResult: api.TaskResult{Attempt: it.key.attempt, Status: courier.OutcomeSuccess, StatusCode: 200, Result: json.RawMessage(`{"ok":true}`)}}
		}
		body, _ := json.Marshal(req)
		status, answer, ok := w.post(items[0].resultsURL, body)
		if !ok {
			return
		}
		var ans api.TaskResultsAnswer
		if status != http.StatusOK || json.Unmarshal(answer, &ans) != nil || len(ans.Results) != len(items) {
			w.problem("results answered %d: %s", status, answer)
			return
		}
		var again []faultResult
		for i, a := range ans.Results {
			if a.Status == http.StatusServiceUnavailable {
				again = append(again, items[i])
				continue
			}
			w.done(items[i].key, a.Status, a.Error)
		}
		items = again
	}
}

// post sends body to the path of link on a gateway until one answers below 500: first the
// gateway link names, then the other, and so on, with a short pause after a round that reached
// none or got 5xx answers (a gateway down, the database restarting), for up to three minutes.
// ok is false when the worker was stopped first or gave up.
func (w *faultWorker) post(link string, body []byte) (status int, answer []byte, ok bool) {
	u, err := url.Parse(link)
	if err != nil {
		w.problem("bad link %q", link)
		return 0, nil, false
	}
	first := 0
	for i, g := range w.gateways {
		if strings.HasPrefix(link, g) {
			first = i
		}
	}
	giveUp := time.Now().Add(3 * time.Minute)
	for {
		if time.Now().After(giveUp) {
			w.problem("no gateway took %s for 3 minutes", u.Path)
			return 0, nil, false
		}
		for j := range w.gateways {
			gw := w.gateways[(first+j)%len(w.gateways)]
			req, _ := http.NewRequest("POST", gw+u.EscapedPath(), bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+w.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := w.hc.Do(req)
			if err != nil {
				w.mu.Lock()
				w.unreachable++
				w.mu.Unlock()
				continue
			}
			answer, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 500 {
				return resp.StatusCode, answer, true
			}
			w.mu.Lock()
			w.unavailable++
			w.mu.Unlock()
		}
		select {
		case <-w.stop:
			return 0, nil, false
		case <-time.After(50 * time.Millisecond):
		}
	}
}
