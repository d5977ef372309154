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
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/taskworker"
	"github.com/courier-oss/courier/webhook"
)

// Config is docparse's configuration. Each field names its environment variable and default.
type Config struct {
	Addr          string        // DOCPARSE_ADDR: listen address; default 127.0.0.1:9090
	CourierURL    string        // COURIER_URL: courier's gateway; default http://127.0.0.1:8080
	APIKey        string        // COURIER_API_KEY: key with the worker scope, for results and heartbeats; required
	Secrets       []string      // DOCPARSE_SECRET: the queue's whsec_ secrets, comma-separated (two during a rotation); default none: pushes are not verified
	ParseTime     time.Duration // DOCPARSE_PARSE_TIME: simulated work per document; default 5s
	Drain         time.Duration // DOCPARSE_DRAIN: how long a shutdown waits for running parses; default 10s
	MaxConcurrent int           // DOCPARSE_MAX_CONCURRENT: parses at once (more are answered 429); default 0: unbounded
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
	switch {
	case c.Addr == "":
		return errors.New("--addr is required")
	case c.APIKey == "":
		return errors.New("--courier-key (or COURIER_API_KEY) is required: an API key with the worker scope " +
			"(courier apikey create --name docparse --scopes worker)")
	case c.ParseTime < 0:
		return errors.New("--parse-time must not be negative")
	case c.Drain < 0:
		return errors.New("--drain must not be negative")
	case c.MaxConcurrent < 0:
		return errors.New("--max-concurrent must not be negative")
	}
	if _, err := client.New(c.CourierURL); err != nil {
		return fmt.Errorf("--courier-url: %w", err)
	}
	if len(c.Secrets) > 0 {
		if _, err := webhook.NewVerifier(c.Secrets...); err != nil {
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

// NewWorker wires the parser into a taskworker.Worker that reports to cfg.CourierURL.
func NewWorker(cfg Config, p *Parser, log *slog.Logger) (*taskworker.Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := client.New(cfg.CourierURL, client.WithAPIKey(cfg.APIKey))
	if err != nil {
		return nil, err
	}
	return taskworker.New(taskworker.Config{Client: c, Secrets: cfg.Secrets, AllowUnsigned: len(cfg.Secrets) == 0,
		MaxConcurrent: cfg.MaxConcurrent, Logger: log}, p.Handle)
}

// run serves the worker until ctx is cancelled.
func run(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	cfg, err := ParseConfig(args, getenv, os.Stderr)
	if err != nil {
		return err
	}
	w, err := NewWorker(cfg, NewParser(cfg.ParseTime), log)
	if err != nil {
		return err
	}
	if len(cfg.Secrets) == 0 {
		log.Warn("no signing secret (--secret or DOCPARSE_SECRET): pushes are not verified")
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+PushPath, w)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("docparse listening", "push_url", "http://"+ln.Addr().String()+PushPath, "courier", cfg.CourierURL,
		"verify_signatures", len(cfg.Secrets) > 0, "parse_time", cfg.ParseTime.String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// First no new pushes (answering one is quick), then let running parses finish.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	log.Info("no new pushes; waiting for running parses", "running", w.Running(), "drain", cfg.Drain.String())
	drainCtx, cancelDrain := context.WithTimeout(context.WithoutCancel(ctx), cfg.Drain)
	defer cancelDrain()
	if err := w.Shutdown(drainCtx); err != nil {
		log.Warn("the drain ran out; unfinished parses were reported as failures", "err", err)
	}
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
	maxConcurrent, err := strconv.Atoi(env("DOCPARSE_MAX_CONCURRENT", "0"))
	if err != nil {
		return Config{}, fmt.Errorf("DOCPARSE_MAX_CONCURRENT: %w", err)
	}
	cfg := Config{}
	var secrets string
	fs := flag.NewFlagSet("docparse", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Addr, "addr", env("DOCPARSE_ADDR", defaultAddr), "listen address; the push_url is http://ADDR/push (DOCPARSE_ADDR)")
	fs.StringVar(&cfg.CourierURL, "courier-url", env("COURIER_URL", defaultCourierURL), "courier gateway URL, where results and heartbeats go (COURIER_URL)")
	fs.StringVar(&cfg.APIKey, "courier-key", env("COURIER_API_KEY", ""), "API key with the worker scope (COURIER_API_KEY)")
	fs.StringVar(&secrets, "secret", env("DOCPARSE_SECRET", ""), "the queue's whsec_ signing secrets, comma-separated; empty: pushes are not verified (DOCPARSE_SECRET)")
	fs.DurationVar(&cfg.ParseTime, "parse-time", parseTime, "simulated parse time per document (DOCPARSE_PARSE_TIME)")
	fs.DurationVar(&cfg.Drain, "drain", drain, "how long a shutdown waits for running parses (DOCPARSE_DRAIN)")
	fs.IntVar(&cfg.MaxConcurrent, "max-concurrent", maxConcurrent, "parses at once, more are answered 429; 0: unbounded (DOCPARSE_MAX_CONCURRENT)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for s := range strings.SplitSeq(secrets, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Secrets = append(cfg.Secrets, s)
		}
	}
	return cfg, cfg.Validate()
}
