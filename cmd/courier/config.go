package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/worker"
	"github.com/courier-oss/courier/workflows"
)

// TemporalConfig says how to reach Temporal.
type TemporalConfig struct {
	Address       string // TEMPORAL_ADDRESS; default 127.0.0.1:7233
	Namespace     string // TEMPORAL_NAMESPACE; default "courier"
	TLS           bool   // TEMPORAL_TLS; default false (implied by a cert or CA)
	TLSCert       string // TEMPORAL_TLS_CERT: client certificate file (mTLS)
	TLSKey        string // TEMPORAL_TLS_KEY: client key file (mTLS)
	TLSCA         string // TEMPORAL_TLS_CA: CA bundle to verify the server
	TLSServerName string // TEMPORAL_TLS_SERVER_NAME: override the verified server name
	// APIKey is TEMPORAL_API_KEY: sent as "authorization: Bearer <key>" on every call (Temporal
	// Cloud's API keys); it turns TLS on. Read from the environment only, never from a flag, so
	// it shows in no process list or -h output; it is never logged. Default none.
	APIKey secretString
}

// secretString is a credential: it prints and logs as "[redacted]" (or "" when unset), so a
// configuration printed by mistake does not leak it.
type secretString string

func (s secretString) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from printing it.
func (s secretString) GoString() string { return strconv.Quote(s.String()) }

// LogValue keeps slog from printing it.
func (s secretString) LogValue() slog.Value { return slog.StringValue(s.String()) }

// OutboxConfig tunes the relay and the delivery budget.
type OutboxConfig struct {
	Sources      sourceList    // COURIER_OUTBOX_SOURCES: extra producer databases, name=url,…
	BatchSize    int           // COURIER_OUTBOX_BATCH; default relay.DefaultBatchSize
	PollInterval time.Duration // COURIER_OUTBOX_POLL; default relay.DefaultPollInterval
	// StartWorkers is COURIER_OUTBOX_START_WORKERS; default relay.DefaultStartWorkers, and
	// relay.EmbeddedStartWorkers in courier dev (set before the flags are bound).
	StartWorkers int
	Lease        time.Duration // COURIER_OUTBOX_LEASE; default relay.DefaultLease
	Retention    time.Duration // COURIER_OUTBOX_RETENTION: how long sent rows are kept; default relay.DefaultSentRetention
	// Retry is COURIER_OUTBOX_ATTEMPT_TIMEOUT, COURIER_OUTBOX_RETRY_* and
	// COURIER_OUTBOX_MAX_ATTEMPTS; default workflows.DefaultOutboxRetry.
	Retry courier.RetryPolicy
	Batch relay.BatchConfig // COURIER_OUTBOX_BATCH_*: outbox_batch.go
	// Ordered is the ordered mode (COURIER_OUTBOX_ORDERED_*: outbox_ordered.go).
	Ordered relay.OrderedConfig
}

// Config is the configuration shared by worker, gateway and dev. Each field names its
// environment variable and default in the flag help.
type Config struct {
	Temporal        TemporalConfig
	DatabaseURL     string        // DATABASE_URL
	NATSURL         string        // NATS_URL: the broker named "default" (nats://127.0.0.1:4222 when no broker is named)
	Brokers         BrokersConfig // COURIER_BROKERS, COURIER_ROUTES, COURIER_DEFAULT_BROKER: brokers.go
	HTTPAddr        string        // COURIER_HTTP_ADDR; gateway (or worker metrics) listen address
	LogLevel        string        // COURIER_LOG_LEVEL; default info
	ShutdownTimeout time.Duration // COURIER_SHUTDOWN_TIMEOUT; default worker.DefaultShutdownTimeout
	MaxBodyBytes    int64         // COURIER_MAX_BODY_BYTES; default gateway.DefaultMaxBodyBytes
	RequestTimeout  time.Duration // COURIER_REQUEST_TIMEOUT; bound on one gateway request's work; default gateway.DefaultRequestTimeout
	Outbox          OutboxConfig
	// Tasks is COURIER_PUBLIC_URL, COURIER_TASK_POLL, COURIER_TASK_SWEEP_EVERY,
	// COURIER_TASK_PUSH_SLOTS and COURIER_TASK_FINISH_SLOTS; the defaults are tasks.Config's.
	Tasks tasks.Config

	// KeyRate is the request rate of each API key without its own, per gateway instance:
	// COURIER_KEY_RATE_LIMIT requests/s (default 0: unlimited, whatever the burst) and
	// COURIER_KEY_RATE_BURST (default 0: the rate rounded up). docs/decisions.md says why there
	// is no default limit.
	// docs/admission.md.
	KeyRate courier.Rate

	// Console is COURIER_CONSOLE: serve the operators' console under /console; default true.
	Console bool
	// TemporalUIURL is COURIER_TEMPORAL_UI_URL: the Temporal Web UI the console links each item
	// to; default none (courier dev: its embedded UI).
	TemporalUIURL string

	// AllowLoopback lets a worker's timer callbacks and task pushes reach 127.0.0.0/8 and ::1,
	// for topologies on one machine (make cluster); COURIER_ALLOW_LOOPBACK; default false
	// (courier dev always allows it).
	AllowLoopback bool

	env envReader // reads the environment for the flags' defaults; Validate reports what did not parse
}

type sourceList []sourceSpec

type sourceSpec struct{ Name, URL string }

func (s *sourceList) String() string {
	return joinPairs(*s, func(v sourceSpec) (string, string) { return v.Name, v.URL })
}

func (s *sourceList) Set(v string) error {
	return splitPairs(v, func(part, name, url string) error {
		if name == "" || url == "" {
			return fmt.Errorf("outbox source %q: want name=database-url", part)
		}
		if name == courier.DefaultSource || !courier.ValidName(name) {
			return fmt.Errorf("outbox source name %q is reserved or breaks the name rule (1-64 of a-z, 0-9, '_', '.', '-')", name)
		}
		*s = append(*s, sourceSpec{Name: name, URL: url})
		return nil
	})
}

// splitPairs calls each with every item of a comma-separated list of key=value pairs (blank
// items skipped): the item, trimmed, and its two sides (the value "" when it has no "=").
func splitPairs(v string, each func(part, key, value string) error) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		key, value, _ := strings.Cut(part, "=")
		if err := each(part, key, value); err != nil {
			return err
		}
	}
	return nil
}

// joinPairs writes items as a comma-separated list of key=value pairs, the flag's own form.
func joinPairs[T any](items []T, pair func(T) (string, string)) string {
	parts := make([]string, len(items))
	for i, it := range items {
		k, v := pair(it)
		parts[i] = k + "=" + v
	}
	return strings.Join(parts, ",")
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// envReader reads typed environment variables for the flags' defaults. A value that does not
// parse is remembered (Validate reports it) instead of silently falling back to the default.
// One reader serves one command's flags: `courier dev` binds its own and the shared ones with
// the Config's.
type envReader struct {
	errs []error // what did not parse, in the order read
}

// envParse reads one typed variable through e.
func envParse[T any](e *envReader, name string, def T, parse func(string) (T, error)) T {
	raw := env(name, "")
	if raw == "" {
		return def
	}
	v, err := parse(raw)
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: %v", name, raw, err))
		return def
	}
	return v
}

// fail remembers a variable that did not parse.
func (e *envReader) fail(err error) { e.errs = append(e.errs, err) }

func (e *envReader) integer(name string, def int) int { return envParse(e, name, def, strconv.Atoi) }

func (e *envReader) duration(name string, def time.Duration) time.Duration {
	return envParse(e, name, def, time.ParseDuration)
}

func (e *envReader) boolean(name string, def bool) bool {
	return envParse(e, name, def, strconv.ParseBool)
}

func (e *envReader) float(name string, def float64) float64 {
	return envParse(e, name, def, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) })
}

// list sets a repeatable flag's value from a comma-separated variable.
func (e *envReader) list(name string, v flag.Value) {
	if err := v.Set(env(name, "")); err != nil {
		e.fail(fmt.Errorf("%s: %w", name, err))
	}
}

// bind registers the shared flags on fs, with environment variables as defaults.
func (c *Config) bind(fs *flag.FlagSet, defaultHTTP string) {
	fs.StringVar(&c.Temporal.Address, "temporal-address", env("TEMPORAL_ADDRESS", "127.0.0.1:7233"), "Temporal frontend host:port (TEMPORAL_ADDRESS)")
	fs.StringVar(&c.Temporal.Namespace, "temporal-namespace", env("TEMPORAL_NAMESPACE", "courier"), "Temporal namespace (TEMPORAL_NAMESPACE)")
	fs.BoolVar(&c.Temporal.TLS, "temporal-tls", c.env.boolean("TEMPORAL_TLS", false), "use TLS to Temporal (TEMPORAL_TLS)")
	fs.StringVar(&c.Temporal.TLSCert, "temporal-tls-cert", env("TEMPORAL_TLS_CERT", ""), "client certificate for mTLS (TEMPORAL_TLS_CERT)")
	fs.StringVar(&c.Temporal.TLSKey, "temporal-tls-key", env("TEMPORAL_TLS_KEY", ""), "client key for mTLS (TEMPORAL_TLS_KEY)")
	fs.StringVar(&c.Temporal.TLSCA, "temporal-tls-ca", env("TEMPORAL_TLS_CA", ""), "CA bundle to verify Temporal (TEMPORAL_TLS_CA)")
	fs.StringVar(&c.Temporal.TLSServerName, "temporal-tls-server-name", env("TEMPORAL_TLS_SERVER_NAME", ""), "TLS server name override (TEMPORAL_TLS_SERVER_NAME)")
	// No flag: a key on the command line would show in every process list.
	c.Temporal.APIKey = secretString(strings.TrimSpace(env("TEMPORAL_API_KEY", "")))
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", ""), "postgres://… or sqlite:PATH (DATABASE_URL)")
	fs.StringVar(&c.NATSURL, "nats-url", env("NATS_URL", ""), "NATS server URL, the broker named default (NATS_URL; "+DefaultNATSURL+" when COURIER_BROKERS names no broker)")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("COURIER_HTTP_ADDR", defaultHTTP), "HTTP listen address (COURIER_HTTP_ADDR)")
	fs.BoolVar(&c.AllowLoopback, "allow-loopback", c.env.boolean("COURIER_ALLOW_LOOPBACK", false), "let timer callbacks and task pushes reach 127.0.0.0/8 and ::1, for every service on one machine (make cluster); never in production (COURIER_ALLOW_LOOPBACK)")
	c.bindRuntime(fs)
}

// bindRuntime registers the flags that do not say where the dependencies are (dev mode brings
// its own).
func (c *Config) bindRuntime(fs *flag.FlagSet) {
	fs.StringVar(&c.LogLevel, "log-level", env("COURIER_LOG_LEVEL", "info"), "debug, info, warn or error (COURIER_LOG_LEVEL)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.env.duration("COURIER_SHUTDOWN_TIMEOUT", worker.DefaultShutdownTimeout), "how long in-flight work may finish on SIGTERM (COURIER_SHUTDOWN_TIMEOUT)")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.env.duration("COURIER_REQUEST_TIMEOUT", gateway.DefaultRequestTimeout), "bound on one gateway request's work; slower requests get 503 (COURIER_REQUEST_TIMEOUT)")
	fs.Float64Var(&c.KeyRate.PerSecond, "key-rate-limit", c.env.float("COURIER_KEY_RATE_LIMIT", 0), "requests per second each API key without its own rate may make, on each gateway; 0 = unlimited (COURIER_KEY_RATE_LIMIT)")
	fs.IntVar(&c.KeyRate.Burst, "key-rate-burst", c.env.integer("COURIER_KEY_RATE_BURST", 0), "requests such a key may make at once above its rate; 0 = the rate rounded up (COURIER_KEY_RATE_BURST)")
	fs.BoolVar(&c.Console, "console", c.env.boolean("COURIER_CONSOLE", true), "serve the operators' console under /console (COURIER_CONSOLE)")
	fs.StringVar(&c.TemporalUIURL, "temporal-ui-url", env("COURIER_TEMPORAL_UI_URL", ""), "the Temporal Web UI's address, for the console's links to each workflow (COURIER_TEMPORAL_UI_URL; dev: its embedded UI)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", int64(c.env.integer("COURIER_MAX_BODY_BYTES", gateway.DefaultMaxBodyBytes)), "request body limit in bytes (COURIER_MAX_BODY_BYTES)")
	c.env.list("COURIER_OUTBOX_SOURCES", &c.Outbox.Sources)
	fs.Var(&c.Outbox.Sources, "outbox-source", "extra producer database to relay from, name=database-url; repeatable (COURIER_OUTBOX_SOURCES, comma-separated)")
	fs.IntVar(&c.Outbox.BatchSize, "outbox-batch", c.env.integer("COURIER_OUTBOX_BATCH", relay.DefaultBatchSize), "outbox rows claimed per batch (COURIER_OUTBOX_BATCH)")
	fs.DurationVar(&c.Outbox.PollInterval, "outbox-poll", c.env.duration("COURIER_OUTBOX_POLL", relay.DefaultPollInterval), "fallback poll interval (COURIER_OUTBOX_POLL)")
	startWorkers := relay.DefaultStartWorkers
	if c.Outbox.StartWorkers > 0 {
		startWorkers = c.Outbox.StartWorkers // courier dev's
	}
	fs.IntVar(&c.Outbox.StartWorkers, "outbox-start-workers", c.env.integer("COURIER_OUTBOX_START_WORKERS", startWorkers), "delivery workflows one claim starts at once, 1 to 256 (COURIER_OUTBOX_START_WORKERS)")
	fs.DurationVar(&c.Outbox.Lease, "outbox-lease", c.env.duration("COURIER_OUTBOX_LEASE", relay.DefaultLease), "after this long a claimed row's delivery is re-ensured by any relay (COURIER_OUTBOX_LEASE)")
	fs.DurationVar(&c.Outbox.Retention, "outbox-retention", c.env.duration("COURIER_OUTBOX_RETENTION", relay.DefaultSentRetention), "sent rows older than this are deleted; negative keeps them (COURIER_OUTBOX_RETENTION)")
	d := workflows.DefaultOutboxRetry
	fs.DurationVar(&c.Outbox.Retry.AttemptTimeout, "outbox-attempt-timeout", c.env.duration("COURIER_OUTBOX_ATTEMPT_TIMEOUT", d.AttemptTimeout), "bound on one publish attempt (COURIER_OUTBOX_ATTEMPT_TIMEOUT)")
	fs.DurationVar(&c.Outbox.Retry.InitialInterval, "outbox-retry-initial", c.env.duration("COURIER_OUTBOX_RETRY_INITIAL", d.InitialInterval), "first retry wait (COURIER_OUTBOX_RETRY_INITIAL)")
	fs.DurationVar(&c.Outbox.Retry.MaxInterval, "outbox-retry-max-interval", c.env.duration("COURIER_OUTBOX_RETRY_MAX_INTERVAL", d.MaxInterval), "longest retry wait (COURIER_OUTBOX_RETRY_MAX_INTERVAL)")
	fs.Float64Var(&c.Outbox.Retry.BackoffCoef, "outbox-retry-backoff", c.env.float("COURIER_OUTBOX_RETRY_BACKOFF", d.BackoffCoef), "retry wait growth factor (COURIER_OUTBOX_RETRY_BACKOFF)")
	attempts := c.env.integer("COURIER_OUTBOX_MAX_ATTEMPTS", int(d.MaxAttempts))
	c.Outbox.Retry.MaxAttempts = attempts
	fs.Func("outbox-max-attempts", fmt.Sprintf("attempts before a record is dead (COURIER_OUTBOX_MAX_ATTEMPTS; default %d)", attempts), func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return errors.New("want a positive integer")
		}
		c.Outbox.Retry.MaxAttempts = v
		return nil
	})
	fs.StringVar(&c.Tasks.PublicURL, "public-url", env("COURIER_PUBLIC_URL", ""), "the gateway's base URL as task workers reach it, for the result and heartbeat links in each push (COURIER_PUBLIC_URL; dev: the gateway's address)")
	fs.DurationVar(&c.Tasks.PollInterval, "task-poll", c.env.duration("COURIER_TASK_POLL", tasks.DefaultPollInterval), "fallback task claim poll interval (COURIER_TASK_POLL)")
	fs.DurationVar(&c.Tasks.SweepEvery, "task-sweep-every", c.env.duration("COURIER_TASK_SWEEP_EVERY", tasks.DefaultSweepEvery), "task sweeper schedule interval (COURIER_TASK_SWEEP_EVERY)")
	fs.IntVar(&c.Tasks.PushSlots, "task-push-slots", c.env.integer("COURIER_TASK_PUSH_SLOTS", tasks.DefaultPushSlots), "task pushes this worker runs at once, on the push task queue; a push holds its slot until the worker answers or the queue's push_timeout passes (COURIER_TASK_PUSH_SLOTS)")
	fs.IntVar(&c.Tasks.FinishSlots, "task-finish-slots", c.env.integer("COURIER_TASK_FINISH_SLOTS", tasks.DefaultFinishSlots), "task sweeps this worker runs at once, on the finish task queue (COURIER_TASK_FINISH_SLOTS)")
	c.bindBrokers(fs)
	c.bindOutboxBatch(fs)
	c.bindOutboxOrdered(fs)
}

// Validate reports the first configuration error in plain words.
func (c *Config) Validate(needDB bool) error {
	if len(c.env.errs) > 0 {
		return fmt.Errorf("bad environment: %w", errors.Join(c.env.errs...))
	}
	switch {
	case needDB && c.DatabaseURL == "":
		return errors.New("DATABASE_URL (or --database-url) is required: postgres://… or sqlite:PATH")
	case c.Temporal.Address == "":
		return errors.New("TEMPORAL_ADDRESS is required")
	case c.Temporal.Namespace == "":
		return errors.New("TEMPORAL_NAMESPACE is required")
	case (c.Temporal.TLSCert == "") != (c.Temporal.TLSKey == ""):
		return errors.New("TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY go together")
	case strings.ContainsFunc(string(c.Temporal.APIKey), func(r rune) bool { return r <= ' ' || r == 0x7f }):
		// The message never quotes the key.
		return errors.New("TEMPORAL_API_KEY holds spaces or control characters: set it to the key alone")
	case c.Outbox.StartWorkers < 1 || c.Outbox.StartWorkers > 256:
		return fmt.Errorf("outbox start workers must be from 1 to 256, got %d", c.Outbox.StartWorkers)
	case c.Outbox.BatchSize < 1 || c.Outbox.BatchSize > 1000:
		return errors.New("outbox batch must be from 1 to 1000")
	case c.Outbox.PollInterval < 10*time.Millisecond:
		return errors.New("outbox poll interval must be at least 10ms")
	case c.Outbox.Retry.MaxInterval < c.Outbox.Retry.InitialInterval:
		// Temporal refuses such a retry policy: every record would go dead at its first failure.
		return fmt.Errorf("outbox retry max interval (%s) must be at least the initial interval (%s)", c.Outbox.Retry.MaxInterval, c.Outbox.Retry.InitialInterval)
	case c.Tasks.PollInterval < 10*time.Millisecond:
		return errors.New("task poll interval must be at least 10ms")
	case c.Tasks.PushSlots < 1 || c.Tasks.PushSlots > 10000:
		return errors.New("task push slots must be from 1 to 10000")
	case c.Tasks.FinishSlots < 1 || c.Tasks.FinishSlots > 10000:
		return errors.New("task finish slots must be from 1 to 10000")
	case c.Tasks.SweepEvery < time.Second:
		return errors.New("task sweep interval must be at least 1s")
	case c.RequestTimeout < time.Second || c.RequestTimeout > 10*time.Minute:
		return errors.New("request timeout must be from 1s to 10m")
	case c.MaxBodyBytes < 1024 || c.MaxBodyBytes > 2<<20:
		return errors.New("max body bytes must be from 1 KiB to 2 MiB (Temporal rejects payloads over 2 MB)")
	}
	if c.TemporalUIURL != "" {
		if u, err := url.Parse(c.TemporalUIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("COURIER_TEMPORAL_UI_URL %q must be an http or https URL such as http://127.0.0.1:8233", c.TemporalUIURL)
		}
	}
	if err := c.validateBrokers(); err != nil {
		return err
	}
	if err := c.validateOutboxBatch(); err != nil {
		return err
	}
	if err := c.validateOutboxOrdered(); err != nil {
		return err
	}
	if c.KeyRate.PerSecond == 0 {
		c.KeyRate.Burst = 0 // a rate of 0 is unlimited, whatever the burst
	}
	if err := courier.CheckRate("COURIER_KEY_RATE_LIMIT", "COURIER_KEY_RATE_BURST", c.KeyRate); err != nil {
		var ce *courier.Error
		if errors.As(err, &ce) {
			return errors.New("key rate: " + ce.Message)
		}
		return err
	}
	return nil
}

// tlsConfig is the TLS to Temporal: none unless TEMPORAL_TLS, a client certificate, a CA or an
// API key asks for it (an API key is never sent in the clear).
func (t TemporalConfig) tlsConfig() (*tls.Config, error) {
	if !t.TLS && t.TLSCert == "" && t.TLSCA == "" && t.APIKey == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.TLSServerName}
	if t.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(t.TLSCert, t.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load Temporal client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.TLSCA != "" {
		pem, err := os.ReadFile(t.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("read Temporal CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("no certificates in TEMPORAL_TLS_CA")
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	// Records logged with a context carry its trace_id, span_id and business ids.
	return slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
}
