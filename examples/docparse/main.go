// Command docparse is courier's task-worker example: a document-parsing worker that courier
// pushes prioritized tasks to.
//
//	docparse --addr 127.0.0.1:9090 --courier-key WORKER_KEY [--secret whsec_…] [--parse-time 5s]
//
// A producer POSTs a task to courier (/v1/tasks, payload {"name": …, "text": …}); courier
// pushes it to the queue's push_url, POST /push here, as an activities.TaskPush signed with
// Standard Webhooks headers when the queue has secrets. docparse checks the signature and the
// body, answers 202 at once and parses in a goroutine (worker.go): it counts the pages, words
// and characters of the text after a simulated parse time, heartbeats to heartbeat_url every
// third of the queue's heartbeat_timeout meanwhile, and POSTs the result to result_url — a
// success with the counts, or a failure when the payload is not a document. A 409 from courier
// means the attempt is no longer current (it timed out, was cancelled or superseded): the work
// is dropped and no result is sent.
//
// Flags fall back to environment variables: DOCPARSE_ADDR, COURIER_URL, COURIER_API_KEY,
// DOCPARSE_SECRET, DOCPARSE_PARSE_TIME and DOCPARSE_DRAIN. SIGINT or SIGTERM stops it
// cleanly. See README.md for a walk-through with courier dev.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/courier-oss/courier/webhook"
)

// Config is docparse's configuration. Each field names its environment variable and default.
type Config struct {
	Addr       string        // DOCPARSE_ADDR: listen address; default 127.0.0.1:9090
	CourierURL string        // COURIER_URL: courier's gateway as its pushes name it; default http://127.0.0.1:8080
	APIKey     string        // COURIER_API_KEY: key with the worker scope, for results and heartbeats; required
	Secret     string        // DOCPARSE_SECRET: the queue's whsec_ signing secret; default empty: pushes are not verified
	ParseTime  time.Duration // DOCPARSE_PARSE_TIME: simulated work per document; default 5s
	Drain      time.Duration // DOCPARSE_DRAIN: how long a shutdown waits for running parses; default 10s
}

// Defaults of the configuration.
const (
	defaultAddr       = "127.0.0.1:9090"
	defaultCourierURL = "http://127.0.0.1:8080" // courier dev's gateway
	defaultParseTime  = 5 * time.Second
	defaultDrain      = 10 * time.Second
)

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	u, err := url.Parse(c.CourierURL)
	switch {
	case c.Addr == "":
		return errors.New("--addr is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("--courier-url %q must be an absolute http or https URL", c.CourierURL)
	case c.APIKey == "":
		return errors.New("--courier-key (or COURIER_API_KEY) is required: an API key with the worker scope " +
			"(courier apikey create --name docparse --scopes worker)")
	case c.ParseTime < 0:
		return errors.New("--parse-time must not be negative")
	case c.Drain < 0:
		return errors.New("--drain must not be negative")
	}
	if c.Secret != "" {
		if _, err := webhook.NewVerifier(c.Secret); err != nil {
			return fmt.Errorf("--secret: %w", err)
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], os.Getenv, log); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "docparse:", err)
		os.Exit(1)
	}
}

// run serves the worker until ctx is cancelled.
func run(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	cfg, err := ParseConfig(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	w, err := NewWorker(cfg, log)
	if err != nil {
		return err
	}
	if cfg.Secret == "" {
		log.Warn("no signing secret (--secret or DOCPARSE_SECRET): pushes are not verified")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: w.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("docparse listening", "push_url", "http://"+ln.Addr().String()+PushPath, "courier", cfg.CourierURL,
		"verify_signatures", cfg.Secret != "", "parse_time", cfg.ParseTime.String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// First no new pushes (the handlers are quick), then let running parses finish.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	log.Info("no new pushes; waiting for running parses", "running", w.Running(), "drain", cfg.Drain.String())
	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.Drain)
	defer cancelDrain()
	w.Stop(drainCtx)
	log.Info("docparse stopped")
	return nil
}

// ParseConfig reads the flags in args over the environment (getenv) over the defaults; usage
// goes to out.
func ParseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	parseTime, err := time.ParseDuration(env("DOCPARSE_PARSE_TIME", defaultParseTime.String()))
	if err != nil {
		return Config{}, fmt.Errorf("DOCPARSE_PARSE_TIME: %w", err)
	}
	drain, err := time.ParseDuration(env("DOCPARSE_DRAIN", defaultDrain.String()))
	if err != nil {
		return Config{}, fmt.Errorf("DOCPARSE_DRAIN: %w", err)
	}
	cfg := Config{}
	fs := flag.NewFlagSet("docparse", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Addr, "addr", env("DOCPARSE_ADDR", defaultAddr), "listen address; the push_url is http://ADDR/push (DOCPARSE_ADDR)")
	fs.StringVar(&cfg.CourierURL, "courier-url", env("COURIER_URL", defaultCourierURL), "courier gateway URL; pushes must name result and heartbeat URLs on it (COURIER_URL)")
	fs.StringVar(&cfg.APIKey, "courier-key", env("COURIER_API_KEY", ""), "API key with the worker scope (COURIER_API_KEY)")
	fs.StringVar(&cfg.Secret, "secret", env("DOCPARSE_SECRET", ""), "the queue's whsec_ signing secret; empty: pushes are not verified (DOCPARSE_SECRET)")
	fs.DurationVar(&cfg.ParseTime, "parse-time", parseTime, "simulated parse time per document (DOCPARSE_PARSE_TIME)")
	fs.DurationVar(&cfg.Drain, "drain", drain, "how long a shutdown waits for running parses (DOCPARSE_DRAIN)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.Validate()
}
