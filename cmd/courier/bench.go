package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/bench"
	"github.com/courier-oss/courier/devstack"
	"github.com/courier-oss/courier/devstack/embeddednats"
	"github.com/courier-oss/courier/worker"
)

// runBench runs a named benchmark against a fresh embedded stack and prints one table.
func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != "outbox" && args[0] != "timers") {
		return fmt.Errorf("usage: courier bench outbox|timers [flags]  (the task benchmark comes with its feature)")
	}
	fs := flag.NewFlagSet("bench "+args[0], flag.ContinueOnError)
	var cfg bench.OutboxConfig
	var tcfg bench.TimersConfig
	if args[0] == "outbox" {
		fs.IntVar(&cfg.Rows, "rows", 2000, "rows committed per scenario")
		fs.Float64Var(&cfg.Rate, "rate", 200, "target commits per second")
		fs.StringVar(&cfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), "also run against this PostgreSQL database, in a throwaway schema (COURIER_BENCH_POSTGRES_URL)")
		fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up on a scenario after this long")
	} else {
		fs.IntVar(&tcfg.Timers, "timers", 1000, "timers per scenario")
		fs.DurationVar(&tcfg.Window, "window", 10*time.Second, "fire times are spread across this window")
		fs.DurationVar(&tcfg.Lead, "lead", 15*time.Second, "the first fire time is this long after creation starts")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
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
	sas := map[string]enumspb.IndexedValueType{}
	for name, typ := range courier.SearchAttributes {
		sas[name] = worker.IndexedValueType(typ)
	}
	tmp, err := devstack.StartTemporal(ctx, devstack.Config{DataDir: dir, TemporalPort: -1, DisableUI: true, SearchAttributes: sas, Logger: quiet})
	if err != nil {
		return err
	}
	defer tmp.Stop()
	tc, err := client.Dial(client.Options{HostPort: tmp.Address(), Namespace: tmp.Namespace(), Logger: sdklog.NewStructuredLogger(quiet)})
	if err != nil {
		return err
	}
	defer tc.Close()
	stack := bench.Stack{Temporal: tc, NATSURL: ns.URL()}
	if args[0] == "timers" {
		_, err = bench.RunTimers(ctx, stack, tcfg)
		return err
	}
	_, err = bench.RunOutbox(ctx, stack, cfg)
	return err
}
