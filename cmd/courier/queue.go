package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/client"
)

// runQueue is `courier queue`: list task queues, show one, or change its dispatch settings
// through a gateway's API.
func runQueue(ctx context.Context, args []string, out io.Writer) error {
	action, err := pickSubcommand("queue", "action", []subcommand{
		{"list", "list the task queues: dispatch mode, push batch size, limit, in flight, state"},
		{"show", "print one queue as the API shows it (JSON): --name NAME"},
		{"set", "change a queue's dispatch settings: --name NAME [--dispatch-mode per-attempt|batched] [--push-batch-size N] [--concurrency-limit N]"},
	}, args)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("queue "+action, flag.ContinueOnError)
	gw := addGatewayFlags(fs)
	var (
		name, mode   *string
		batch, limit *int
		asJSON       *bool
	)
	switch action {
	case "list":
		asJSON = fs.Bool("json", false, "print the queues as the API shows them (JSON) rather than a table")
	case "show":
		name = fs.String("name", "", "the queue")
	case "set":
		name = fs.String("name", "", "the queue")
		mode = fs.String("dispatch-mode", "", `"per-attempt" (one workflow run per attempt) or "batched" (one run pushes a whole claim); see docs/tasks.md`)
		batch = fs.Int("push-batch-size", 0, "attempts one push carries, 1 to 1000 (above 1 only in the batched mode); switching to per-attempt without it sets 1")
		limit = fs.Int("concurrency-limit", 0, "the queue's limit of tasks in Processing, 1 to 10000")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if name != nil && *name == "" {
		return &usageError{msg: "--name is required", usage: flagUsage(fs)}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if action == "set" && !given["dispatch-mode"] && !given["push-batch-size"] && !given["concurrency-limit"] {
		return &usageError{msg: "nothing to set: give --dispatch-mode, --push-batch-size or --concurrency-limit", usage: flagUsage(fs)}
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	switch action {
	case "list":
		qs, err := c.ListQueues(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(out, qs)
		}
		printQueues(out, qs)
		return nil
	case "show":
		q, err := c.GetQueue(ctx, *name)
		if err != nil {
			return err
		}
		return printJSON(out, q)
	}
	return setQueue(ctx, c, out, *name, setFlags{mode: *mode, batch: *batch, limit: *limit, given: given})
}

// setFlags are the settings `courier queue set` was given.
type setFlags struct {
	mode         string
	batch, limit int
	given        map[string]bool
}

// setQueue changes the given settings of a queue and keeps every other: it reads the queue and
// puts its whole configuration back with them changed (a PUT replaces the whole configuration).
// A change made by someone else between the read and the write is overwritten.
func setQueue(ctx context.Context, c *client.Client, out io.Writer, name string, f setFlags) error {
	q, err := c.GetQueue(ctx, name)
	if err != nil {
		return err
	}
	cfg := q.Config()
	if f.given["dispatch-mode"] {
		cfg.DispatchMode = courier.DispatchMode(f.mode)
		if cfg.DispatchMode == courier.DispatchPerAttempt && !f.given["push-batch-size"] {
			cfg.PushBatchSize = 1 // batched pushes need the batched mode
		}
	}
	if f.given["push-batch-size"] {
		cfg.PushBatchSize = f.batch
	}
	if f.given["concurrency-limit"] {
		cfg.ConcurrencyLimit = f.limit
	}
	after, err := c.PutQueue(ctx, name, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "queue %s: dispatch_mode %s, push_batch_size %d, concurrency_limit %d (was %s, %d, %d)\n",
		after.Name, after.DispatchMode, after.PushBatchSize, after.ConcurrencyLimit, q.DispatchMode, q.PushBatchSize, q.ConcurrencyLimit)
	return nil
}

// printQueues writes the queues as a table.
func printQueues(out io.Writer, qs []client.Queue) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDISPATCH\tPUSH BATCH\tLIMIT\tIN FLIGHT\tSTATE\tPUSH URL")
	for _, q := range qs {
		state := "running"
		if q.Paused != nil {
			state = "paused"
		}
		url := q.PushURL
		if url == "" {
			url = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", q.Name, q.DispatchMode, q.PushBatchSize, q.ConcurrencyLimit, q.InFlight, state, url)
	}
	_ = tw.Flush()
}

func printJSON(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
