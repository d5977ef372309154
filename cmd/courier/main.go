package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `courier: durable asynchronous business work on Temporal.

Usage:
  courier dev       run everything in one process (embedded Temporal + UI, NATS, SQLite)
  courier migrate   apply database migrations (DATABASE_URL)
  courier worker    run the Temporal worker and the outbox relay
  courier gateway   run the HTTP gateway
  courier apikey    create or revoke API keys, or set their request rates
  courier pause     pause a task queue, a business type or an outbox topic pattern
  courier resume    resume it
  courier pauses    list what is paused
  courier queue     list task queues, show one, or switch its dispatch mode
  courier bench     run a benchmark (courier bench -h lists them)
  courier version   print the build's version and commit

Every command takes -h for its flags; each flag also reads the environment variable named in
its help text.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "dev":
		err = runDev(ctx, args)
	case "migrate":
		err = runMigrate(ctx, args)
	case "worker":
		err = runWorker(ctx, args)
	case "gateway":
		err = runGateway(ctx, args)
	case "apikey":
		err = runAPIKey(ctx, args)
	case "pause":
		err = runPause(ctx, args, os.Stdout)
	case "resume":
		err = runResume(ctx, args, os.Stdout)
	case "pauses":
		err = runPauses(ctx, args, os.Stdout)
	case "queue":
		err = runQueue(ctx, args, os.Stdout)
	case "bench":
		err = runBench(ctx, args)
	case "version":
		err = runVersion(args, os.Stdout)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "courier: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) { // the usage was asked for and printed
		os.Exit(0)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(os.Stderr, "courier %s: %s\n\n%s", os.Args[1], ue.msg, ue.usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "courier %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
