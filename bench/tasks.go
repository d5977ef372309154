package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
)

// TasksConfig sets up `courier bench tasks`.
type TasksConfig struct {
	Tasks       int           // tasks per scenario, spread evenly over priorities 1–5; default 2000
	Limit       int           // the queue's concurrency limit (the baseline's activity slots); default 20
	Work        time.Duration // how long the HTTP task worker works on each task; default 20 ms
	PostgresURL string        // also run against this PostgreSQL database when set
	Timeout     time.Duration // per scenario; default 10 min
	// Keys, when set, runs every courier scenario a second time on a queue whose keys take
	// turns (fair_keys), the tasks spread round robin over this many concurrency keys: the
	// cost of fairness per task next to the unkeyed run, in the same process. 0: off.
	Keys int
	// Mode picks the scenarios: ModePerAttempt (the default: bare Temporal and courier's
	// per-attempt mode), ModeBatched (the batched mode's and River's) or ModeAll.
	Mode    string
	Batched BatchedConfig // the batched mode's scenarios
	River   RiverConfig   // River beside them (PostgreSQL only); Dir "" skips it
	// Standalone adds the engine's own job queue beside the baseline: one standalone activity
	// per task (taskStandalone). The server must allow them (StandaloneDynamicConfig).
	Standalone bool
	Out        io.Writer // where the table goes; default stdout
}

// The modes of `courier bench tasks --mode`.
const (
	ModePerAttempt = "per-attempt"
	ModeBatched    = "batched"
	ModeAll        = "all"
)

// TasksRun is what one `courier bench tasks` run measured.
type TasksRun struct {
	PerAttempt []TaskResult    // bare Temporal and the per-attempt mode (ModePerAttempt, ModeAll)
	Batched    []BatchedResult // the batched mode (ModeBatched, ModeAll)
	River      *RiverResult    // River's run beside the batched mode; nil: not asked for
}

// RunTaskModes runs the scenarios cfg.Mode picks: the per-attempt ones first, then River's
// (so both queues meet the same machine, one after the other), then the batched mode's.
func RunTaskModes(ctx context.Context, stack Stack, cfg TasksConfig) (TasksRun, error) {
	var run TasksRun
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	switch cfg.Mode {
	case "", ModePerAttempt, ModeBatched, ModeAll:
	default:
		return run, fmt.Errorf("mode must be %s, %s or %s; got %q", ModePerAttempt, ModeBatched, ModeAll, cfg.Mode)
	}
	if cfg.Mode != ModeBatched {
		rs, err := RunTasks(ctx, stack, cfg)
		run.PerAttempt = rs
		if err != nil || cfg.Mode == "" || cfg.Mode == ModePerAttempt {
			return run, err
		}
	}
	if cfg.River.Dir != "" {
		rc := cfg.River
		b := cfg.Batched.withDefaults()
		if rc.Jobs <= 0 {
			rc.Jobs = b.Tasks
		}
		if rc.SteadyRate == 0 && b.SteadyTasks > 0 {
			rc.SteadyRate = b.Rate
		}
		timeout := cfg.Timeout
		if timeout <= 0 {
			timeout = 10 * time.Minute
		}
		run.River = RunRiver(ctx, cfg.PostgresURL, rc, timeout)
	}
	rs, err := RunBatched(ctx, stack, cfg)
	run.Batched = rs
	if err != nil {
		return run, err
	}
	PrintBatchedTable(cfg.Out, cfg, run.Batched, run.River, run.PerAttempt)
	return run, nil
}

// TaskResult is one row of the task table.
type TaskResult struct {
	Scenario  string
	Key       string // stable name in --json output: bare, courier-sqlite, courier-postgres
	N         int
	Limit     int
	MaxSeen   int           // most tasks the HTTP task worker held at once
	Elapsed   time.Duration // from the first push to the last success and, for courier, its last run closed
	PerSec    float64       // completed tasks per second over Elapsed
	P50, P99  time.Duration // from each task's insert (or workflow start) to its first push
	Max       time.Duration
	Shares    [courier.PriorityBands]float64 // percent of the pushes per band while every band had a backlog
	SharesOf  int                            // how many pushes Shares counts
	Duplicate int                            // pushes of a task that had been pushed before (retries)
	Backlog   time.Duration                  // how long inserting (or starting) the backlog took
	Held      time.Duration                  // mean time the HTTP task worker held a task (push to its report done)
	SlotsMax  int                            // courier only: most slots taken at once in the limiter row
	SlotsAvg  float64                        // courier only: mean slots taken while tasks ran
	Cost      Cost                           // history events and billable actions per task
	// CPU is what the run spent while its tasks ran: from opening the queue (courier) or
	// starting the worker (bare) until every run had closed (courier: as the engine's
	// visibility store counts them) or completed (bare).
	CPU cpuSpent
	// StartCPU is what this process spent building the backlog, before the run: for bare, the
	// workflow starts that courier's claimer makes inside its run.
	StartCPU time.Duration
}

// slotSamples summarises readings of a queue's in_flight.
type slotSamples struct {
	n, sum, max int
}

func (s *slotSamples) add(v int) { s.n, s.sum, s.max = s.n+1, s.sum+v, max(s.max, v) }

func (s *slotSamples) mean() float64 {
	if s.n == 0 {
		return 0
	}
	return float64(s.sum) / float64(s.n)
}

// taskStartParallelism is how many inserts (or workflow starts) run at once while the backlog
// is built, in every scenario alike.
const taskStartParallelism = 8

// RunTasks fills a queue with a backlog over every priority, opens it, and measures how fast
// courier pushes the tasks to an HTTP task worker (which works for cfg.Work, then reports its
// result through the gateway), how long each task waits for its push, how the bands share the
// slots and whether the limit holds; on SQLite, on PostgreSQL when given, and next to a
// bare-Temporal baseline doing the same HTTP work in one activity per workflow.
func RunTasks(ctx context.Context, stack Stack, cfg TasksConfig) ([]TaskResult, error) {
	defaults.UnlessPositive(&cfg.Tasks, 2000)
	defaults.UnlessPositive(&cfg.Limit, 20)
	defaults.UnlessPositive(&cfg.Work, 20*time.Millisecond)
	defaults.UnlessPositive(&cfg.Timeout, 10*time.Minute)
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	quiet := quietLogger()

	var results []TaskResult
	base, err := taskBaseline(ctx, stack.Temporal, cfg)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	results = append(results, base)
	if cfg.Standalone {
		sa, err := taskStandalone(ctx, stack.Temporal, cfg)
		if err != nil {
			return results, fmt.Errorf("standalone activities: %w", err)
		}
		results = append(results, sa)
	}
	err = forEachDatabase(ctx, "courier-bench-tasks-", cfg.PostgresURL, func(name, url string) error {
		r, err := runTasks(ctx, stack.Temporal, stack.namespace(), name, url, cfg, 0, quiet)
		if err != nil {
			return fmt.Errorf("tasks on %s: %w", name, err)
		}
		results = append(results, r)
		if cfg.Keys > 0 {
			r, err := runTasks(ctx, stack.Temporal, stack.namespace(), name, url, cfg, cfg.Keys, quiet)
			if err != nil {
				return fmt.Errorf("keyed tasks on %s: %w", name, err)
			}
			results = append(results, r)
		}
		return nil
	})
	if err != nil {
		return results, err
	}
	PrintTaskTable(cfg.Out, fmt.Sprintf("tasks: %d per scenario over priorities 1-5, limit %d, %s of work per task (at most %.0f/s), weights %s",
		cfg.Tasks, cfg.Limit, cfg.Work, float64(cfg.Limit)/cfg.Work.Seconds(), formatShares(weightShares(courier.DefaultBandWeights))), results)
	printCost(cfg.Out, costRows(results, func(r TaskResult) (string, Cost) { return r.Scenario, r.Cost }))
	return results, nil
}

// runTasks is one courier scenario: worker with its claimer, gateway, HTTP task worker. With
// keys > 0 the queue's keys take turns and the tasks are spread over that many keys.
func runTasks(ctx context.Context, tc client.Client, namespace, dbName, dbURL string, cfg TasksConfig, keys int, log *slog.Logger) (TaskResult, error) {
	scenario, taskQueue := dbName, "bench-tasks-"+dbName
	if keys > 0 {
		scenario, taskQueue = fmt.Sprintf("%s, %d keys", dbName, keys), taskQueue+"-keyed"
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	st, err := openDB(ctx, dbURL)
	if err != nil {
		return TaskResult{}, err
	}
	defer st.Close()
	_, token, err := st.CreateAPIKey(ctx, "bench-task-worker", []apikey.Scope{apikey.ScopeWorker})
	if err != nil {
		return TaskResult{}, err
	}

	// The gateway's address goes into every push, so it listens before the worker is built;
	// it serves once the task service (which wakes the worker's claimer) exists.
	gw := httptest.NewUnstartedServer(nil)
	defer gw.Close()
	w, err := worker.Start(ctx, worker.Config{
		DisableRelay:           true,
		AllowLoopbackCallbacks: true,
		Relay:                  relay.Config{TaskQueue: taskQueue},
		Tasks: tasks.Config{
			PublicURL:  "http://" + gw.Listener.Addr().String(),
			SweepEvery: time.Hour,
		},
	}, worker.Deps{Temporal: tc, Publisher: nopPublisher{}, Logger: log, Tasks: st,
		Sources: worker.DefaultSources(st)})
	if err != nil {
		return TaskResult{}, err
	}
	defer func() {
		w.Stop()
		// The next scenario's worker starts the sweeper again, on its own queue.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(dctx, courier.TaskSweeperID, "", "the bench scenario ended")
	}()
	svc := tasks.NewService(st, tc, namespace, w.WakeTasks, nil, log)
	gw.Config.Handler = gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Tasks: svc, Logger: log})
	gw.Start()

	pl := newPushLog(cfg.Tasks)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * cfg.Limit}}
	defer hc.CloseIdleConnections()
	var (
		working    sync.WaitGroup
		mu         sync.Mutex
		resultErrs []error
	)
	tw := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p api.TaskPush
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		since := pl.begin(p.TaskID, p.Priority)
		working.Add(1)
		go func() {
			defer working.Done()
			defer pl.end(since)
			select {
			case <-time.After(cfg.Work):
			case <-ctx.Done():
				return
			}
			if err := postResult(ctx, hc, token, p); err != nil {
				mu.Lock()
				resultErrs = append(resultErrs, fmt.Errorf("%s: %w", p.TaskID, err))
				mu.Unlock()
			}
		}()
		rw.WriteHeader(http.StatusAccepted)
	}))
	defer func() { tw.Close(); working.Wait() }()

	queue := "bench" // the keyed run has a queue of its own: the counts below are per queue
	if keys > 0 {
		queue = "bench-keyed"
	}
	if _, _, err := svc.PutQueue(ctx, courier.Queue{Name: queue, ConcurrencyLimit: cfg.Limit, FairKeys: keys > 0}); err != nil {
		return TaskResult{}, err
	}
	// The whole backlog is in place before the queue has a push URL, so every band is full
	// when dispatch starts.
	run := time.Now().UnixNano()
	inserted := make([]time.Time, cfg.Tasks)
	backlogStart, inserting := time.Now(), markCPU(false)
	err = forEach(ctx, cfg.Tasks, taskStartParallelism, func(i int) error {
		r := courier.TaskRequest{TaskID: fmt.Sprintf("%s-%d-%d", dbName, run, i), Version: 1,
			Priority: taskPriority(i), Queue: queue, Payload: json.RawMessage(fmt.Sprintf(`{"file":"doc-%d.pdf"}`, i))}
		if keys > 0 {
			r.ConcurrencyKey = fmt.Sprintf("tenant-%d", i%keys)
		}
		_, _, err := svc.Insert(ctx, r)
		inserted[i] = time.Now()
		return err
	})
	if err != nil {
		return TaskResult{}, fmt.Errorf("insert: %w", err)
	}
	backlog := time.Since(backlogStart)
	onPostgres := st.IsPostgres()
	running := markCPU(onPostgres)
	if _, _, err := svc.PutQueue(ctx, courier.Queue{Name: queue, ConcurrencyLimit: cfg.Limit, PushURL: tw.URL, FairKeys: keys > 0}); err != nil {
		return TaskResult{}, err
	}
	// The limiter row is cheap to read, so it is sampled often (how many slots are taken, from
	// the first push on); the full count runs only once the slots are all free again.
	var (
		last     time.Time
		slots    slotSamples
		finished int64
	)
	for {
		mu.Lock()
		failed := errors.Join(resultErrs...)
		mu.Unlock()
		if failed != nil { // a refused result leaves its task to time out: stop now, say why
			return TaskResult{}, fmt.Errorf("result refused: %w", failed)
		}
		q, err := st.GetQueue(ctx, queue)
		if err != nil {
			return TaskResult{}, err
		}
		if pl.started() {
			slots.add(q.InFlight)
			if q.InFlight == 0 {
				stats, err := st.TaskStats(ctx)
				if err != nil {
					return TaskResult{}, err
				}
				if finished = stats.ByQueueStatus[queue][courier.TaskSuccess]; finished == int64(cfg.Tasks) {
					last = time.Now()
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			return TaskResult{}, fmt.Errorf("%d of %d tasks had succeeded at the last full count before the timeout: %w", finished, cfg.Tasks, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A task's row says Success before its run has closed (the run ends a workflow task
	// later), so the run is over only once every run has closed too: the engine's work for
	// the last tasks is inside the measured time, as the bare scenario's is.
	ids := make([]string, cfg.Tasks)
	for i := range ids {
		ids[i] = courier.TaskWorkflowID(fmt.Sprintf("%s-%d-%d", dbName, run, i), 1)
	}
	if err := waitRunsClosed(ctx, tc, namespace, courier.KindTask.Workflow); err != nil {
		return TaskResult{}, err
	}
	cpu := running.until(markCPU(onPostgres))
	closed, err := lastClose(ctx, tc, ids)
	if err != nil {
		return TaskResult{}, err
	}
	last = later(last, closed)
	lat := make([]time.Duration, 0, cfg.Tasks)
	for i := range cfg.Tasks {
		at, ok := pl.firstPush(fmt.Sprintf("%s-%d-%d", dbName, run, i))
		if !ok {
			return TaskResult{}, fmt.Errorf("task %d succeeded without a push", i)
		}
		lat = append(lat, at.Sub(inserted[i]))
	}
	r := pl.result("courier tasks, "+scenario, cfg, lat, last, backlog)
	r.SlotsMax, r.SlotsAvg = slots.max, slots.mean()
	r.CPU, r.StartCPU = cpu, inserting.until(running).Self
	r.Key = "courier-" + dbName
	if keys > 0 {
		r.Key += "-keyed"
	}
	if r.Cost, err = measureCost(ctx, tc, ids); err != nil {
		return TaskResult{}, err
	}
	return r, nil
}

// postResult reports success the way a task worker does: to the push's result URL, with a
// worker-scope key, naming the attempt.
func postResult(ctx context.Context, hc *http.Client, token string, p api.TaskPush) error {
	body, err := json.Marshal(api.TaskResult{Attempt: p.Attempt, Status: courier.OutcomeSuccess, StatusCode: 200, Message: "done"})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.ResultURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("result: %d %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}

const (
	taskBaseWorkflow = "bench-task-workflow"
	taskBaseActivity = "bench-task-activity"
)

// taskBaseJob is what the baseline's activity posts to its HTTP worker.
type taskBaseJob struct {
	ID       string `json:"id"`
	Priority int    `json:"priority"`
}

// taskBaseline: N workflows started before their worker runs, each with one activity that
// posts the job to an HTTP worker which works for cfg.Work before it answers. The worker's
// MaxConcurrentActivityExecutionSize is the limit. Temporal's task queue is FIFO, so the
// "bands" are labels only.
func taskBaseline(ctx context.Context, tc client.Client, cfg TasksConfig) (TaskResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	pl := newPushLog(cfg.Tasks)
	hw := newBaseWorker(cfg, pl)
	defer hw.close()

	queue := fmt.Sprintf("bench-task-baseline-%d", time.Now().UnixNano())
	w := sdkworker.New(tc, queue, sdkworker.Options{MaxConcurrentWorkflowTaskPollers: 8, MaxConcurrentActivityTaskPollers: 8,
		MaxConcurrentActivityExecutionSize: cfg.Limit})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, j taskBaseJob) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 3}})
		return workflow.ExecuteActivity(ctx, taskBaseActivity, j).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: taskBaseWorkflow})
	w.RegisterActivityWithOptions(hw.post, activity.RegisterOptions{Name: taskBaseActivity})

	// The backlog is in place before the worker polls, as in the courier scenarios.
	run := time.Now().UnixNano()
	started := make([]time.Time, cfg.Tasks)
	runs := make([]client.WorkflowRun, cfg.Tasks)
	backlogStart, starting := time.Now(), markCPU(false)
	err := forEach(ctx, cfg.Tasks, taskStartParallelism, func(i int) error {
		j := taskBaseJob{ID: fmt.Sprintf("base-%d-%d", run, i), Priority: taskPriority(i)}
		r, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: j.ID, TaskQueue: queue}, taskBaseWorkflow, j)
		started[i], runs[i] = time.Now(), r
		return err
	})
	if err != nil {
		return TaskResult{}, fmt.Errorf("start: %w", err)
	}
	backlog := time.Since(backlogStart)
	running := markCPU(false)
	if err := w.Start(); err != nil {
		return TaskResult{}, err
	}
	defer w.Stop()
	for _, r := range runs {
		if err := r.Get(ctx, nil); err != nil {
			return TaskResult{}, err
		}
	}
	cpu := running.until(markCPU(false))
	ids := make([]string, cfg.Tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("base-%d-%d", run, i)
	}
	// The server's close times, as for courier's runs: a result's return can trail its close
	// by up to the engine's 20 s long-poll expiry when a wake-up is missed.
	last, err := lastClose(ctx, tc, ids)
	if err != nil {
		return TaskResult{}, err
	}
	lat := make([]time.Duration, 0, cfg.Tasks)
	for i := range cfg.Tasks {
		at, ok := pl.firstPush(ids[i])
		if !ok {
			return TaskResult{}, fmt.Errorf("workflow %d completed without a push", i)
		}
		lat = append(lat, at.Sub(started[i]))
	}
	r := pl.result("bare Temporal: workflow + 1 activity, FIFO", cfg, lat, last, backlog)
	r.CPU, r.StartCPU = cpu, starting.until(running).Self
	r.Key = "bare"
	if r.Cost, err = measureCost(ctx, tc, ids); err != nil {
		return TaskResult{}, err
	}
	return r, nil
}

// pushLog is what an HTTP task worker saw: each task's first push, the order of the bands, and
// how many tasks it held at once (from the push until its work and report were done).
type pushLog struct {
	mu        sync.Mutex
	cur, max  int
	held      time.Duration // summed over every push, from begin to end
	ended     int
	first     map[string]time.Time
	start     time.Time // the first push of all
	order     []int     // bands of first pushes, in arrival order
	duplicate int
}

func newPushLog(n int) *pushLog {
	return &pushLog{first: make(map[string]time.Time, n), order: make([]int, 0, n)}
}

// begin records a push and returns its arrival time, to be passed to end.
func (l *pushLog) begin(id string, band int) time.Time {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur++
	l.max = max(l.max, l.cur)
	if _, seen := l.first[id]; seen {
		l.duplicate++
		return now
	}
	if len(l.first) == 0 {
		l.start = now
	}
	l.first[id] = now
	l.order = append(l.order, band)
	return now
}

// end records that the worker is done with a push that arrived at since.
func (l *pushLog) end(since time.Time) {
	held := time.Since(since)
	l.mu.Lock()
	l.cur--
	l.held += held
	l.ended++
	l.mu.Unlock()
}

// started reports whether any push has arrived.
func (l *pushLog) started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.start.IsZero()
}

func (l *pushLog) firstPush(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.first[id]
	return at, ok
}

func (l *pushLog) result(name string, cfg TasksConfig, lat []time.Duration, last time.Time, backlog time.Duration) TaskResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := summarize(name, lat, last.Sub(l.start))
	r := TaskResult{Scenario: name, N: s.N, Limit: cfg.Limit, MaxSeen: l.max, Elapsed: s.Elapsed, PerSec: s.Throughput,
		P50: s.P50, P99: s.P99, Max: s.Max, Duplicate: l.duplicate, Backlog: backlog}
	if l.ended > 0 {
		r.Held = l.held / time.Duration(l.ended)
	}
	r.Shares, r.SharesOf = backlogShares(l.order, bandSizes(cfg.Tasks))
	return r
}

// taskPriority spreads tasks evenly over the bands: 1, 2, 3, 4, 5, 1, 2, …
func taskPriority(i int) int { return i%courier.MaxPriority + 1 }

// bandSizes is how many of n tasks taskPriority puts in each band.
func bandSizes(n int) [courier.PriorityBands]int {
	var sizes [courier.PriorityBands]int
	for i := range sizes {
		sizes[i] = n / 5
		if i < n%5 {
			sizes[i]++
		}
	}
	return sizes
}

// backlogShares returns each band's percentage of the pushes made while every band still had
// a backlog: bands are taken in push order up to and including the push that took the first
// band's last task (its claim still saw that band non-empty). sizes are the bands' backlogs at
// the start; n is how many pushes the shares count (0 if some band started empty).
func backlogShares(order []int, sizes [courier.PriorityBands]int) (shares [courier.PriorityBands]float64, n int) {
	for _, s := range sizes {
		if s == 0 {
			return shares, 0
		}
	}
	var counts [courier.PriorityBands]int
	for _, b := range order {
		if b < 1 || b > 5 {
			continue
		}
		counts[b-1]++
		n++
		if counts[b-1] == sizes[b-1] {
			break
		}
	}
	for i, c := range counts {
		if n > 0 {
			shares[i] = 100 * float64(c) / float64(n)
		}
	}
	return shares, n
}

// weightShares turns a queue's weights into percentages.
func weightShares(w courier.BandWeights) [courier.PriorityBands]float64 {
	var out [courier.PriorityBands]float64
	sum := 0
	for _, v := range w {
		sum += v
	}
	for i, v := range w {
		if sum > 0 {
			out[i] = 100 * float64(v) / float64(sum)
		}
	}
	return out
}

// formatShares prints percentages as "35/25/20/12/8".
func formatShares(s [courier.PriorityBands]float64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, "/")
}

// PrintTaskTable prints task results as a Markdown table, in the style of PrintTable.
func PrintTaskTable(w io.Writer, title string, rs []TaskResult) {
	fmt.Fprintf(w, "\n%s\n\n", title)
	fmt.Fprintln(w, "| scenario | n | limit | max seen | slots taken max/mean | elapsed | completed/s | insert→push p50 | p99 | band shares % (pushes counted) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rs {
		shares := "n/a"
		if r.SharesOf > 0 {
			shares = fmt.Sprintf("%s (%d)", formatShares(r.Shares), r.SharesOf)
		}
		slots := "n/a"
		if r.SlotsMax > 0 {
			slots = fmt.Sprintf("%d / %.1f", r.SlotsMax, r.SlotsAvg)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %.1fs | %.1f | %s | %s | %s |\n", r.Scenario, r.N, r.Limit, r.MaxSeen, slots,
			r.Elapsed.Seconds(), r.PerSec, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), shares)
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		fmt.Fprintf(w, "%s: backlog of %d built in %.1fs (%.0f/s) before dispatch began; the HTTP worker held each task %s",
			r.Scenario, r.N, r.Backlog.Seconds(), float64(r.N)/max(r.Backlog.Seconds(), 1e-9), r.Held.Round(time.Millisecond))
		if r.SlotsMax > 0 && r.PerSec > 0 {
			// Little's law: the mean slots taken over the completion rate is how long a task
			// holds its slot, from its claim to its recorded result.
			fmt.Fprintf(w, ", each slot was held %s per task", time.Duration(r.SlotsAvg/r.PerSec*float64(time.Second)).Round(time.Millisecond))
		}
		if r.Duplicate > 0 {
			fmt.Fprintf(w, "; %d pushes repeated a task already pushed", r.Duplicate)
		}
		fmt.Fprintln(w)
	}
	printTaskCPU(w, rs)
	if len(rs) > 1 && rs[0].PerSec > 0 {
		// The bare scenario starts its workflows before its worker polls, so its rate leaves
		// the starts out; courier's claimer starts each attempt's run inside the measured time.
		// The bare rate with its starts counted is the other yardstick.
		bare := rs[0]
		withStarts := float64(bare.N) / (bare.Backlog + bare.Elapsed).Seconds()
		for _, r := range rs[1:] {
			if r.PerSec > 0 {
				fmt.Fprintf(w, "%s: %.0f%% of the bare-Temporal rate, one completion every %.1f ms against %.1f ms; %.0f%% of bare with its starts counted (%.1f/s)\n", r.Scenario,
					100*r.PerSec/bare.PerSec, 1000/r.PerSec, 1000/bare.PerSec, 100*r.PerSec/withStarts, withStarts)
			}
		}
	}
}

// printTaskCPU prints each scenario's CPU per task and, from the bare scenario's, the share of
// the bare rate that a run which also starts one workflow per task can reach on the same cores.
func printTaskCPU(w io.Writer, rs []TaskResult) {
	for _, r := range rs {
		line := r.CPU.describe("task", r.N)
		if line == "" {
			continue
		}
		fmt.Fprintf(w, "%s: %s", r.Scenario, line)
		if r.Key == "bare" && r.StartCPU > 0 {
			fmt.Fprintf(w, "; starting its workflow, before the run, cost %s more", msString(perItem(r.StartCPU, r.N)))
		}
		fmt.Fprintln(w)
	}
	if len(rs) > 1 {
		if c, ok := startCeiling(rs[0]); ok {
			fmt.Fprintf(w, "courier's claimer starts each task's run inside the measured time, bare starts its workflows before it: at bare's CPU per task plus one start, and the same CPU use, a run reaches %.0f%% of the bare rate\n", 100*c)
		}
	}
}

// startCeiling is the share of the bare scenario's rate that a run reaches when it spends the
// CPU bare spends per task plus one workflow start, at the same CPU use: a CPU-bound run's rate
// is its CPU use over its CPU per task.
func startCeiling(bare TaskResult) (float64, bool) {
	if bare.Key != "bare" || bare.CPU.Self <= 0 || bare.StartCPU <= 0 {
		return 0, false
	}
	return float64(bare.CPU.Self) / float64(bare.CPU.Self+bare.StartCPU), true
}

// msString prints a duration in milliseconds with one decimal.
func msString(d time.Duration) string { return fmt.Sprintf("%.1f ms", ms(d)) }

// forEach runs fn for 0..n-1 on at most par goroutines and returns the first error; after an
// error no new calls start.
func forEach(ctx context.Context, n, par int, fn func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
