package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/client"
)

// devKeyFile is where courier dev keeps its admin key; the pause commands use it when no key
// is given, so they work against `make run` as they are.
const devKeyFile = ".courier/dev-api-key"

// gatewayFlags are the flags of the commands that call a gateway's API.
type gatewayFlags struct{ url, key *string }

func addGatewayFlags(fs *flag.FlagSet) gatewayFlags {
	return gatewayFlags{
		url: fs.String("url", env("COURIER_URL", "http://127.0.0.1:8080"), "the gateway's URL (COURIER_URL)"),
		key: fs.String("api-key", env("COURIER_API_KEY", ""), "an admin API key (COURIER_API_KEY; default: the key in "+devKeyFile+" when there is one)"),
	}
}

func (g gatewayFlags) client() (*client.Client, error) {
	key := *g.key
	if key == "" {
		raw, err := os.ReadFile(devKeyFile)
		if err != nil {
			return nil, errors.New("an admin API key is required: --api-key or COURIER_API_KEY")
		}
		key = strings.TrimSpace(string(raw))
	}
	return client.New(*g.url, client.WithAPIKey(key), client.WithUserAgent("courier-cli"))
}

// pauseTarget reads the one of --queue, --biz-type and --topic that was given.
func pauseTarget(queue, bizType, topic string, usage string) (courier.PauseKind, string, error) {
	var kind courier.PauseKind
	var name string
	n := 0
	for _, t := range []struct {
		k courier.PauseKind
		v string
	}{{courier.PauseQueue, queue}, {courier.PauseBizType, bizType}, {courier.PauseTopic, topic}} {
		if t.v != "" {
			kind, name = t.k, t.v
			n++
		}
	}
	if n != 1 {
		return "", "", &usageError{msg: "give exactly one of --queue, --biz-type and --topic", usage: usage}
	}
	return kind, name, nil
}

// runPause is `courier pause`: hold a task queue, a business type or an outbox topic pattern.
func runPause(ctx context.Context, args []string, out io.Writer) error {
	return runPauseOrResume(ctx, "pause", args, out)
}

// runResume is `courier resume`: lift a pause.
func runResume(ctx context.Context, args []string, out io.Writer) error {
	return runPauseOrResume(ctx, "resume", args, out)
}

func runPauseOrResume(ctx context.Context, cmd string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	gw := addGatewayFlags(fs)
	queue := fs.String("queue", "", "a task queue: nothing of it is pushed")
	bizType := fs.String("biz-type", "", "a business type: none of its timers or schedules is delivered")
	topic := fs.String("topic", "", "an outbox topic pattern (orders.> or orders.*): none of its records is published")
	var reason *string
	if cmd == "pause" {
		reason = fs.String("reason", "", "why, shown wherever the pause is")
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	kind, name, err := pauseTarget(*queue, *bizType, *topic, flagUsage(fs))
	if err != nil {
		return err
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	var p *client.Pause
	if cmd == "pause" {
		p, err = c.Pause(ctx, kind, name, *reason)
	} else {
		p, err = c.Resume(ctx, kind, name)
	}
	if err != nil {
		return err
	}
	if cmd == "pause" {
		fmt.Fprintf(out, "paused %s\n", describePause(*p))
	} else {
		fmt.Fprintf(out, "resumed %s %s after %s\n", p.Kind, p.Name, time.Since(p.PausedAt).Round(time.Second))
	}
	return nil
}

// runPauses is `courier pauses`: list the pauses in force.
func runPauses(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("pauses", flag.ContinueOnError)
	gw := addGatewayFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := gw.client()
	if err != nil {
		return err
	}
	list, err := c.ListPauses(ctx)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "nothing is paused")
	}
	for _, p := range list {
		fmt.Fprintln(out, describePause(p))
	}
	return nil
}

func describePause(p client.Pause) string {
	s := fmt.Sprintf("%s %s (by %s, since %s)", p.Kind, p.Name, p.PausedBy, p.PausedAt.Format(time.RFC3339))
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}
