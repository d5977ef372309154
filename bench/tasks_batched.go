package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"sort"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/apikey"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
)

// BatchedConfig sets up the batched dispatch mode's scenarios of `courier bench tasks --mode
// batched`: a burn-down (the backlog inserted before the queue opens) and a steady load (tasks
// inserted at a fixed rate while the queue runs), on SQLite and, when given, PostgreSQL.
type BatchedConfig struct {
	Tasks         int     // burn-down tasks; default 20,000
	SteadyTasks   int     // steady-load tasks; default 10,000; negative skips the steady scenarios
	Rate          float64 // steady-load inserts per second; default 1,000
	Limit         int     // the queue's concurrency limit; default 1,000 (the River run's MaxWorkers)
	PushBatchSize int     // the queue's push_batch_size; default 100 (1: a push per task, results one by one)
	ClaimSize     int     // the worker's tasks.Config.BatchedClaimSize (the most one batch run pushes); 0: its default
	SkipSQLite    bool    // run on PostgreSQL only
}

// withDefaults fills c's zero fields.
func (c BatchedConfig) withDefaults() BatchedConfig {
	if c.Tasks <= 0 {
		c.Tasks = 20_000
	}
	if c.SteadyTasks == 0 {
		c.SteadyTasks = 10_000
	}
	if c.Rate <= 0 {
		c.Rate = 1000
	}
	if c.Limit <= 0 {
		c.Limit = 1000
	}
	if c.PushBatchSize <= 0 {
		c.PushBatchSize = 100
	}
	return c
}

// The loads a batched scenario runs.
const (
	LoadBurnDown = "burn-down" // the whole backlog inserted before the queue opens
	LoadSteady   = "steady"    // inserted at a fixed rate while the queue runs
)

// BatchedResult is one batched-mode scenario.
type BatchedResult struct {
	Scenario      string // for the table
	Key           string // stable name in --json output: courier-batched-<db>[-steady]
	Load          string // LoadBurnDown or LoadSteady
	N             int
	Limit         int
	Elapsed       time.Duration // burn-down: from the queue's opening; steady: from the first insert; to the last Success
	PerSec        float64       // tasks per second over Elapsed, end to end (insert → push → result → Success)
	InsertPerSec  float64       // the inserts' own rate (burn-down: building the backlog; steady: as achieved)
	InsertToPush  latencies
	PushToSuccess latencies // from the push's arrival at the worker to the answer that recorded its success
	Lost          int       // tasks not Success in the rows at the end, or never acknowledged to the worker
	MaxHeld       int       // most tasks the worker held at once (from a push's arrival to its result's answer)
	OverLimit     int       // by how much MaxHeld exceeded the limit (0: never)
	Duplicate     int       // pushes of an attempt already pushed
	Pushes        int       // push requests
	Batches       int       // batch runs
	Cost          Cost
	CPU           cpuSpent
}

// latencies summarises a set of durations.
type latencies struct{ P50, P99, Max time.Duration }

func latenciesOf(ds []time.Duration) latencies {
	if len(ds) == 0 {
		return latencies{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return latencies{P50: ds[len(ds)/2], P99: ds[len(ds)*99/100], Max: ds[len(ds)-1]}
}

// RunBatched runs the batched mode's scenarios on SQLite and, when cfg.PostgresURL is set,
// PostgreSQL: a burn-down of cfg.Batched.Tasks, then a steady load of its SteadyTasks at its
// Rate, each on a queue of its own with an in-process HTTP worker that answers each push at
// once and reports every result (all of a batched push's in one POST /v1/tasks/results).
func RunBatched(ctx context.Context, stack Stack, cfg TasksConfig) ([]BatchedResult, error) {
	b := cfg.Batched.withDefaults()
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	var out []BatchedResult
	err := forEachDatabase(ctx, "courier-bench-batched-", cfg.PostgresURL, func(name, url string) error {
		if name == "sqlite" && b.SkipSQLite && cfg.PostgresURL != "" {
			return nil
		}
		loads := []string{LoadBurnDown}
		if b.SteadyTasks > 0 {
			loads = append(loads, LoadSteady)
		}
		for _, load := range loads {
			r, err := runBatched(ctx, stack, name, url, b, load, cfg.Timeout)
			if err != nil {
				return fmt.Errorf("batched tasks (%s) on %s: %w", load, name, err)
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// runBatched is one batched scenario: a worker with its claimer, a gateway, the HTTP task
// worker, one queue in the batched mode.
func runBatched(ctx context.Context, stack Stack, dbName, dbURL string, cfg BatchedConfig, load string, timeout time.Duration) (BatchedResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tc, namespace := stack.Temporal, stack.namespace()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n := cfg.Tasks
	if load == LoadSteady {
		n = cfg.SteadyTasks
	}
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return BatchedResult{}, err
	}
	defer st.Close()
	if err := schema.Up(ctx, st.DB(), schema.AllSets...); err != nil {
		return BatchedResult{}, err
	}
	_, token, err := st.CreateAPIKey(ctx, "bench-batched-worker", []apikey.Scope{apikey.ScopeWorker})
	if err != nil {
		return BatchedResult{}, err
	}
	taskQueue := fmt.Sprintf("bench-batched-%s-%s", dbName, load)
	gw := httptest.NewUnstartedServer(nil)
	defer gw.Close()
	w, err := worker.New(worker.Config{
		DisableRelay:           true,
		AllowLoopbackCallbacks: true,
		Relay:                  relay.Config{TaskQueue: taskQueue},
		Tasks: tasks.Config{PublicURL: "http://" + gw.Listener.Addr().String(), SweepEvery: time.Hour,
			BatchedClaimSize: cfg.ClaimSize},
	}, worker.Deps{Temporal: tc, Publisher: nopPublisher{}, Logger: quiet, Tasks: st,
		Sources: []relay.Source{{Name: courier.DefaultSource, Store: st}}})
	if err != nil {
		return BatchedResult{}, err
	}
	if err := w.Start(ctx); err != nil {
		return BatchedResult{}, err
	}
	defer func() {
		w.Stop()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(dctx, courier.TaskSweeperID, "", "the bench scenario ended")
	}()
	svc := tasks.NewService(st, tc, namespace, w.WakeTasks, nil, quiet)
	gw.Config.Handler = gateway.New(gateway.Config{}, gateway.Deps{Keys: st, Outbox: st, Tasks: svc, Logger: quiet})
	gw.Start()

	tw := newTaskWorker(ctx, token, n)
	srv := httptest.NewServer(tw)
	defer func() { srv.Close(); tw.wait() }()

	queue := "bench-batched-" + load
	q := courier.Queue{Name: queue, ConcurrencyLimit: cfg.Limit, DispatchMode: courier.DispatchBatched, PushBatchSize: cfg.PushBatchSize}
	if load == LoadSteady {
		q.PushURL = srv.URL // open from the start: tasks are pushed as they come
	}
	if _, _, err := svc.PutQueue(ctx, q); err != nil {
		return BatchedResult{}, err
	}
	run := time.Now().UnixNano()
	idOf := func(i int) string { return fmt.Sprintf("%s-%s-%d-%d", dbName, load, run, i) }
	inserted := make([]time.Time, n)
	insert := func(i int) error {
		inserted[i] = time.Now() // before the call: a push may come before the insert returns
		_, _, err := svc.Insert(ctx, courier.TaskRequest{TaskID: idOf(i), Version: 1, Priority: taskPriority(i), Queue: queue,
			Payload: []byte(fmt.Sprintf(`{"file":"doc-%d.pdf"}`, i))})
		return err
	}
	onPostgres := st.IsPostgres()
	var (
		start    time.Time // where the end-to-end time starts
		running  cpuMark
		insertPS float64
	)
	insertStart := time.Now()
	if load == LoadBurnDown {
		if err := forEach(ctx, n, taskStartParallelism, insert); err != nil {
			return BatchedResult{}, fmt.Errorf("insert: %w", err)
		}
		insertPS = float64(n) / time.Since(insertStart).Seconds()
		start, running = time.Now(), markCPU(onPostgres)
		q.PushURL = srv.URL
		if _, _, err := svc.PutQueue(ctx, q); err != nil {
			return BatchedResult{}, err
		}
	} else {
		start, running = insertStart, markCPU(onPostgres)
		took, err := paced(ctx, n, cfg.Rate, 4*taskStartParallelism, insert)
		if err != nil {
			return BatchedResult{}, fmt.Errorf("insert: %w", err)
		}
		insertPS = float64(n) / took.Seconds()
	}
	if err := tw.waitDone(ctx, n); err != nil {
		return BatchedResult{}, err
	}
	cpu := running.until(markCPU(onPostgres))
	res := BatchedResult{Scenario: fmt.Sprintf("courier batched, %s, %s", load, dbName), Key: "courier-batched-" + dbName,
		Load: load, N: n, Limit: cfg.Limit, InsertPerSec: insertPS, CPU: cpu}
	if load == LoadSteady {
		res.Key += "-steady"
	}
	last, toPush, toSuccess, missing := tw.timings(n, idOf, inserted)
	res.Elapsed = last.Sub(start)
	res.PerSec = float64(n) / res.Elapsed.Seconds()
	res.InsertToPush, res.PushToSuccess = latenciesOf(toPush), latenciesOf(toSuccess)
	res.MaxHeld, res.Duplicate, res.Pushes = tw.stats()
	res.OverLimit = max(0, res.MaxHeld-cfg.Limit)
	if err := tw.failed(); err != nil {
		return res, fmt.Errorf("the worker's results: %w", err)
	}
	// Lost: acknowledged to the worker or not, every task must be Success in its row.
	stats, err := st.TaskStats(ctx)
	if err != nil {
		return res, err
	}
	res.Lost = max(missing, n-int(stats.ByQueueStatus[queue][courier.TaskSuccess]))
	batches, err := batchIDs(ctx, st, queue)
	if err != nil {
		return res, err
	}
	res.Batches = len(batches)
	if res.Cost, err = perTaskCost(ctx, tc, batches, n); err != nil {
		return res, err
	}
	return res, nil
}

// paced calls fn(i) for i in 0..n-1, the i-th due rate·i after the start, on up to par
// goroutines, and returns how long the calls took from the start to the last one's return.
func paced(ctx context.Context, n int, rate float64, par int, fn func(i int) error) (time.Duration, error) {
	start := time.Now()
	err := forEach(ctx, n, par, func(i int) error {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return fn(i)
	})
	return time.Since(start), err
}

// batchIDs lists the batch runs that pushed a queue's tasks, as their rows name them.
func batchIDs(ctx context.Context, st *store.Store, queue string) ([]string, error) {
	var ids []string
	err := st.DB().NewRaw("SELECT DISTINCT batch_id FROM courier_tasks WHERE queue = ? AND batch_id IS NOT NULL", queue).Scan(ctx, &ids)
	return ids, err
}

// perTaskCost is what n tasks pushed by the given batch runs cost the engine per task: the
// runs' mean cost, read from a sample, times their number, over the tasks.
func perTaskCost(ctx context.Context, tc client.Client, batches []string, n int) (Cost, error) {
	c, err := measureCost(ctx, tc, batches)
	if err != nil || n == 0 {
		return c, err
	}
	per := float64(len(batches)) / float64(n)
	c.Events *= per
	c.Actions *= per
	return c, nil
}

// PrintBatchedTable prints the batched scenarios, with River's run and the per-attempt mode's
// rate beside them when measured.
func PrintBatchedTable(w io.Writer, cfg TasksConfig, rs []BatchedResult, river *RiverResult, perAttempt []TaskResult) {
	b := cfg.Batched.withDefaults()
	claim := b.ClaimSize
	if claim <= 0 {
		claim = tasks.DefaultBatchedClaimSize
	}
	fmt.Fprintf(w, "\nbatched dispatch mode: burn-down %d tasks, steady %d tasks at %.0f/s; limit %d, up to %d tasks a batch run, push_batch_size %d; the worker answers each push at once and reports every result\n\n",
		b.Tasks, b.SteadyTasks, b.Rate, b.Limit, claim, b.PushBatchSize)
	fmt.Fprintln(w, "| scenario | n | tasks/s end to end | inserts/s | insert→push p50 | p99 | push→Success p50 | p99 | events/task | actions/task | batch runs | pushes | max held (limit) | lost | over limit |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %d | %d | %d (%d) | %d | %d |\n", r.Scenario, r.N, r.PerSec, r.InsertPerSec,
			r.InsertToPush.P50.Round(time.Millisecond), r.InsertToPush.P99.Round(time.Millisecond),
			r.PushToSuccess.P50.Round(time.Millisecond), r.PushToSuccess.P99.Round(time.Millisecond),
			costPerItem(r.Cost.Events), costPerItem(r.Cost.Actions), r.Batches, r.Pushes, r.MaxHeld, r.Limit, r.Lost, r.OverLimit)
	}
	if river != nil {
		if river.Err != "" {
			fmt.Fprintf(w, "| River (%s) | - | not run: %s | | | | | | | | | | | | |\n", river.Command, river.Err)
		} else {
			fmt.Fprintf(w, "| River burn-down (%s) | %d | %.0f | %.0f | | | | | n/a | n/a | | | | | |\n", river.Command, river.N, river.PerSec, river.InsertPerSec)
			if river.SteadyRate > 0 {
				fmt.Fprintf(w, "| River steady %d/s | %d | | | p50 %s | p99 %s | | | | | | | | | |\n", river.SteadyRate, river.SteadyRate*10,
					river.SteadyP50.Round(time.Millisecond), river.SteadyP99.Round(time.Millisecond))
			}
		}
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if line := r.CPU.describe("task", r.N); line != "" {
			fmt.Fprintf(w, "%s: %s\n", r.Scenario, line)
		}
	}
	for _, ratio := range Ratios(rs, river, perAttempt) {
		fmt.Fprintf(w, "%s: %.2f\n", ratio.Name, ratio.Value)
	}
}

// Ratio compares two scenarios' rates in one run.
type Ratio struct {
	Name  string  `json:"name"` // "<scenario>/<scenario>"
	Value float64 `json:"value"`
}

// Ratios are the batched burn-downs' rates over River's and over the per-attempt mode's on the
// same database, where both were measured.
func Ratios(rs []BatchedResult, river *RiverResult, perAttempt []TaskResult) []Ratio {
	var out []Ratio
	for _, r := range rs {
		if r.Load != LoadBurnDown || r.PerSec <= 0 {
			continue
		}
		if river != nil && river.Err == "" && river.PerSec > 0 {
			out = append(out, Ratio{Name: r.Key + "/river", Value: r.PerSec / river.PerSec})
		}
		for _, p := range perAttempt {
			if p.Key == "courier-"+r.Key[len("courier-batched-"):] && p.PerSec > 0 {
				out = append(out, Ratio{Name: r.Key + "/" + p.Key, Value: r.PerSec / p.PerSec})
			}
		}
	}
	return out
}
