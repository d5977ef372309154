package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/courier-oss/courier/bench"
)

// runBench runs a named benchmark against a fresh embedded stack and prints one table.
func runBench(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "outbox" {
		return fmt.Errorf("usage: courier bench outbox [flags]  (the task and timer benchmarks come with their features)")
	}
	fs := flag.NewFlagSet("bench outbox", flag.ContinueOnError)
	var cfg bench.OutboxConfig
	fs.IntVar(&cfg.Rows, "rows", 2000, "rows committed per scenario")
	fs.Float64Var(&cfg.Rate, "rate", 200, "target commits per second")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", env("COURIER_BENCH_POSTGRES_URL", ""), "also run against this PostgreSQL database (COURIER_BENCH_POSTGRES_URL)")
	fs.DurationVar(&cfg.Timeout, "timeout", 10*time.Minute, "give up on a scenario after this long")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	_, err := bench.RunOutbox(ctx, cfg)
	return err
}
