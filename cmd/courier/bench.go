//go:build !slim

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/bench"
	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/worker"
)

// runBench runs a named benchmark against a fresh embedded stack and prints one table.
func runBench(ctx context.Context, args []string) error {
	if _, err := pickSubcommand("bench", "benchmark", []subcommand{
		{"outbox", "outbox commit-to-publish latency and throughput, SQLite and optionally PostgreSQL"},
		{"timers", "timer fire-time accuracy under load"},
		{"tasks", "prioritized task dispatch: throughput and priority shares under a concurrency limit"},
		{"schedules", "cron triggers per second sustained: schedules on the timer wheel beside Temporal Schedules and zsetcron"},
	}, args); err != nil {
		return err
	}
	tuneGC(os.Getenv) // the bench hosts the embedded engine, as courier dev does
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	var cfg bench.OutboxConfig
	var tcfg bench.TimersConfig
	var kcfg bench.TasksConfig
	var bcfg bench.BucketedConfig
	var scfg bench.SchedulesConfig
	var timerMode string
	postgresUsage := "also run against this PostgreSQL database, in a throwaway schema (COURIER_BENCH_POSTGRES_URL)"
	switch args[0] {
	case "outbox":
		fs.IntVar(&cfg.Rows, "rows", 2000, "rows committed per scenario")
		fs.Float64Var(&cfg.Rate, "rate", 200, "target commits per second")
		fs.IntVar(&cfg.BatchRows, "batch-rows", 20000, "rows per batch-mode scenario (courier-batch-*); 0 skips them")
		fs.Float64Var(&cfg.BatchRate, "batch-rate", 1000, "target rows per second in the batch-mode scenarios, committed every 10 ms")
		fs.IntVar(&cfg.BatchMax, "batch-max", relay.DefaultBatchMax, "records per batch in the batch-mode scenarios (COURIER_OUTBOX_BATCH_MAX)")
		fs.BoolVar(&cfg.Ordered, "ordered", false, "add the ordered-mode scenarios (courier-ordered-*): --rows rows at --rate over --ordered-keys keys, beside the per-record ones")
		fs.IntVar(&cfg.OrderedKeys, "ordered-keys", 20, "keys the ordered-mode scenarios spread their rows over, round-robin")
		fs.StringVar(&cfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), postgresUsage)
		fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up on a scenario after this long")
		fs.StringVar(&cfg.River.Dir, "river-dir", defaultRiverDir(), "the riverbench module, run with go run before the batch-mode scenarios on --postgres-url's server (in a database of its own, created for the run and dropped after it); empty: no River run")
		fs.IntVar(&cfg.River.Jobs, "river-jobs", 20000, "River's burn-down jobs (-n); 0: --batch-rows")
	case "timers":
		fs.IntVar(&tcfg.Timers, "timers", 1000, "timers per scenario")
		fs.DurationVar(&tcfg.Window, "window", 10*time.Second, "fire times are spread across this window")
		fs.DurationVar(&tcfg.Lead, "lead", 15*time.Second, "the first fire time is this long after creation starts")
		fs.StringVar(&timerMode, "mode", "workflow", "workflow: timers of their own beside bare Temporal; bucketed: bucketed timers (NATS and signed HTTP), created through the batch endpoint")
		fs.IntVar(&bcfg.Timers, "bucketed-timers", 100_000, "timers per bucketed scenario")
		fs.StringVar(&bcfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), postgresUsage)
	case "schedules":
		fs.IntVar(&scfg.Schedules, "schedules", 100_000, "interval schedules on the timer wheel per scenario, jittered across the interval")
		fs.DurationVar(&scfg.Interval, "interval", 10*time.Second, "every schedule's interval")
		fs.DurationVar(&scfg.Duration, "duration", 60*time.Second, "the window of fire times measured, after one interval of warm-up")
		fs.IntVar(&scfg.TemporalSchedules, "temporal-schedules", 100, "Temporal Schedules in the baseline (today's mode, each run a workflow); 0 skips it")
		fs.StringVar(&scfg.Zsetcron, "zsetcron", "", "a built zsetcron binary (../shared/peers/zsetcron, Redis on 127.0.0.1:6379) to run beside in both claim styles; empty skips it")
		fs.StringVar(&scfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), postgresUsage)
		fs.BoolVar(&scfg.SkipSQLite, "skip-sqlite", false, "run the wheel scenarios on PostgreSQL only (the baseline still runs, on SQLite)")
	case "tasks":
		fs.IntVar(&kcfg.Tasks, "tasks", 2000, "tasks per scenario, spread evenly over priorities 1-5")
		fs.IntVar(&kcfg.Limit, "limit", 20, "the queue's concurrency limit (and the baseline's concurrent activities)")
		fs.DurationVar(&kcfg.Work, "work", 20*time.Millisecond, "how long the HTTP task worker works on each task")
		fs.StringVar(&kcfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), postgresUsage)
		fs.DurationVar(&kcfg.Timeout, "timeout", 10*time.Minute, "give up on a scenario after this long")
		fs.BoolVar(&kcfg.Standalone, "standalone", false, "also run the engine's own job queue: one standalone activity per task (Temporal 1.32's public preview), beside the bare baseline")
		fs.IntVar(&kcfg.Keys, "keys", 0, "also run each courier scenario on a queue whose concurrency keys take turns, the tasks spread over this many keys, to compare fairness's cost per task with the unkeyed run (0: off)")
		fs.StringVar(&kcfg.Mode, "mode", bench.ModePerAttempt, "per-attempt: bare Temporal beside courier's per-attempt mode; batched: the batched dispatch mode (burn-down and steady) beside River; all: both")
		fs.IntVar(&kcfg.Batched.Tasks, "batched-tasks", 20000, "tasks of each batched burn-down scenario (inserted before the queue opens), and River's jobs")
		fs.IntVar(&kcfg.Batched.SteadyTasks, "steady-tasks", 10000, "tasks of each batched steady scenario, inserted at --rate while the queue runs (negative: no steady scenarios)")
		fs.Float64Var(&kcfg.Batched.Rate, "rate", 1000, "inserts per second of the batched steady scenarios (and River's steady run)")
		fs.IntVar(&kcfg.Batched.Limit, "batched-limit", 1000, "the batched queue's concurrency limit (River runs with 1,000 workers)")
		fs.IntVar(&kcfg.Batched.PushBatchSize, "push-batch-size", 100, "the batched queue's push_batch_size (1: one push per task, each result on its own)")
		fs.IntVar(&kcfg.Batched.ClaimSize, "claim-size", tasks.DefaultBatchedClaimSize, "the most tasks one claim of the batched queue takes, pushed by one batch run (the worker's tasks.Config.BatchedClaimSize)")
		fs.BoolVar(&kcfg.Batched.SkipSQLite, "batched-postgres-only", false, "run the batched scenarios on --postgres-url only, not on SQLite too")
		fs.StringVar(&kcfg.River.Dir, "river-dir", defaultRiverDir(), "the riverbench module, run with go run beside the batched scenarios on --postgres-url's server (in a database of its own, created for the run and dropped after it); empty: no River run")
	}
	temporalAddr := fs.String("temporal-address", env("COURIER_BENCH_TEMPORAL_ADDRESS", ""), "run on this Temporal frontend (host:port; a cluster such as make cluster's) instead of an embedded server; the bare baseline runs there too (COURIER_BENCH_TEMPORAL_ADDRESS)")
	temporalNS := fs.String("temporal-namespace", "courier", "the namespace on --temporal-address")
	asJSON := fs.Bool("json", false, "write exactly one JSON object to stdout (the tables go to stderr)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run (the engine, the relay and the producers) to this file, for go tool pprof")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if args[0] == "tasks" && kcfg.Mode != bench.ModePerAttempt && kcfg.Mode != bench.ModeBatched && kcfg.Mode != bench.ModeAll {
		return &usageError{msg: "--mode must be per-attempt, batched or all", usage: flagUsage(fs)}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *asJSON {
		cfg.Out, tcfg.Out, kcfg.Out, bcfg.Out, scfg.Out = os.Stderr, os.Stderr, os.Stderr, os.Stderr, os.Stderr
	}
	dir, err := os.MkdirTemp("", "courier-bench-stack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ns, err := embeddednats.Start(embeddednats.Config{Port: -1, StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	tc, namespace, stopEngine, err := benchEngine(ctx, dir, *temporalAddr, *temporalNS, quiet)
	if err != nil {
		return err
	}
	defer stopEngine()
	stack := bench.Stack{Temporal: tc, NATSURL: ns.URL(), Namespace: namespace}
	switch args[0] {
	case "timers":
		run := bench.RunTimers
		switch timerMode {
		case "workflow":
		case "bucketed":
			bcfg.Window = tcfg.Window
			run = func(ctx context.Context, stack bench.Stack, _ bench.TimersConfig) ([]bench.TimerResult, error) {
				return bench.RunTimersBucketed(ctx, stack, bcfg)
			}
		default:
			return &usageError{msg: "--mode must be workflow or bucketed", usage: flagUsage(fs)}
		}
		rs, err := run(ctx, stack, tcfg)
		return report(*asJSON, err, func() bench.Report { return bench.TimersReport(rs) })
	case "schedules":
		rs, err := bench.RunSchedules(ctx, stack, scfg)
		return report(*asJSON, err, func() bench.Report { return bench.SchedulesReport(rs) })
	case "tasks":
		run, err := bench.RunTaskModes(ctx, stack, kcfg)
		return report(*asJSON, err, func() bench.Report { return bench.TasksReport(run) })
	}
	run, err := bench.RunOutbox(ctx, stack, cfg)
	return report(*asJSON, err, func() bench.Report { return bench.OutboxReport(run) })
}

// defaultRiverDir is ../shared/peers/riverbench beside the repository the working directory is
// in (the nearest directory up with a go.mod), or beside the working directory.
func defaultRiverDir() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir = d
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return filepath.Join(dir, "..", "shared", "peers", "riverbench")
}

// benchEngine connects to the Temporal frontend at addr, or, without one, starts an embedded
// server in dir. stop closes the client and stops the embedded server.
func benchEngine(ctx context.Context, dir, addr, namespace string, quiet *slog.Logger) (tc client.Client, ns string, stop func(), err error) {
	logger := sdklog.NewStructuredLogger(quiet)
	if addr != "" {
		tc, err = client.Dial(client.Options{HostPort: addr, Namespace: namespace, Logger: logger})
		if err != nil {
			return nil, "", nil, fmt.Errorf("connect to Temporal at %s: %w", addr, err)
		}
		if err := worker.EnsureSearchAttributes(ctx, tc, namespace); err != nil {
			tc.Close()
			return nil, "", nil, err
		}
		return tc, namespace, tc.Close, nil
	}
	sas := map[string]enumspb.IndexedValueType{}
	for name, typ := range courier.SearchAttributes {
		sas[name] = worker.IndexedValueType(typ)
	}
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: dir, TemporalPort: -1, DisableUI: true, SearchAttributes: sas, Logger: quiet,
		DynamicConfig: bench.StandaloneDynamicConfig})
	if err != nil {
		return nil, "", nil, err
	}
	tc, err = client.Dial(client.Options{HostPort: tmp.Address(), Namespace: tmp.Namespace(), Logger: logger})
	if err != nil {
		tmp.Stop()
		return nil, "", nil, err
	}
	return tc, tmp.Namespace(), func() { tc.Close(); tmp.Stop() }, nil
}

// report writes a finished run's JSON object to stdout when asked; a failed run writes none.
func report(asJSON bool, err error, r func() bench.Report) error {
	if err != nil || !asJSON {
		return err
	}
	return bench.WriteJSON(os.Stdout, r())
}
