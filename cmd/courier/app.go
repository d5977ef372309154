package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/gateway"
	"github.com/courier-oss/courier/health"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/mq/brokers"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/schema"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/worker"
)

// app holds the connections one process shares between its roles.
type app struct {
	cfg      Config
	log      *slog.Logger
	reg      *prometheus.Registry
	store    *store.Store
	sources  []relay.Source
	temporal client.Client
	pub      *mq.Router // every configured broker, topics routed by pattern
	closers  []io.Closer
	dev      bool // courier dev: timer callbacks may reach loopback
	// interceptors go on the Temporal client: Temporal's tracing interceptor when tracing is
	// on (startTracing).
	interceptors []interceptor.ClientInterceptor
	taskMetrics  *metrics.Tasks // registered once, shared by the worker and the gateway (tasks)
	// watcher keeps the pauses in force for this process's worker (pauseWatcher); the pause
	// service kicks it on a change made here.
	watcher *pauses.Watcher
	// workerChecks are the readiness checks of a worker in this process (workerHealth), which
	// a gateway in the same process adds to its own.
	workerChecks []health.Check
}

// pauseWatcher returns the process's pause watcher, started on first use: it has read the
// pauses once before it is returned, and on PostgreSQL it hears every change at its commit.
func (a *app) pauseWatcher(ctx context.Context) (*pauses.Watcher, error) {
	if a.watcher != nil {
		return a.watcher, nil
	}
	w := pauses.NewWatcher(a.store, 0, a.log)
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("read the pauses: %w", err)
	}
	stop := a.store.Listen(ctx, store.PausesChannel, w.Kick, a.log)
	a.closers = append(a.closers, closerFunc(func() error { stop(); return nil }))
	a.watcher = w
	return w, nil
}

// tasksMetrics returns the task metrics, registering them on first use.
func (a *app) tasksMetrics() *metrics.Tasks {
	if a.taskMetrics == nil {
		a.taskMetrics = metrics.NewTasks(a.reg)
	}
	return a.taskMetrics
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// openDB opens courier's database and every extra outbox source. migrate applies migrations
// (dev mode does; production runs `courier migrate` first).
func (a *app) openDB(ctx context.Context, migrate bool) error {
	st, err := store.Open(ctx, a.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	a.store = st
	a.closers = append(a.closers, st)
	if migrate {
		if err := schema.Up(ctx, st.DB(), schema.AllSets...); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	a.sources = worker.DefaultSources(st)
	for _, spec := range a.cfg.Outbox.Sources {
		src, err := store.Open(ctx, spec.URL)
		if err != nil {
			return fmt.Errorf("outbox source %s: %w", spec.Name, err)
		}
		a.closers = append(a.closers, src)
		if migrate {
			if err := schema.Up(ctx, src.DB(), schema.Outbox); err != nil {
				return fmt.Errorf("outbox source %s: migrate: %w", spec.Name, err)
			}
		}
		a.sources = append(a.sources, relay.Source{Name: spec.Name, Store: src})
	}
	return nil
}

// connect opens the databases, Temporal and the brokers, in that order; migrate applies
// migrations first (dev mode). The brokers' health is checked until ctx ends.
func (a *app) connect(ctx context.Context, migrate bool) error {
	if err := a.startTracing(ctx); err != nil {
		return err
	}
	if err := a.openDB(ctx, migrate); err != nil {
		return err
	}
	if err := a.dialTemporal(ctx); err != nil {
		return err
	}
	if err := a.dialBrokers(); err != nil {
		return err
	}
	go a.pub.Watch(ctx, a.cfg.Brokers.CheckInterval, 3*time.Second)
	return nil
}

// dialTemporal connects to Temporal with the SDK's metrics exported to the registry.
func (a *app) dialTemporal(ctx context.Context) error {
	tlsCfg, err := a.cfg.Temporal.tlsConfig()
	if err != nil {
		return err
	}
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:      a.reg,
		OnRegisterError: func(err error) { a.log.Debug("temporal metric registration", "error", err) },
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sdktally.PrometheusSanitizeOptions,
		Prefix:          "temporal",
	}, time.Second)
	a.closers = append(a.closers, closer)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := client.Options{
		HostPort:          a.cfg.Temporal.Address,
		Namespace:         a.cfg.Temporal.Namespace,
		Logger:            sdklog.NewStructuredLogger(a.log.With("component", "temporal-sdk")),
		MetricsHandler:    sdktally.NewMetricsHandler(scope),
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg},
		Interceptors:      a.interceptors,
	}
	if a.cfg.Temporal.APIKey != "" {
		// "authorization: Bearer <key>" on every call; a new key takes a restart (docs/deployment.md).
		opts.Credentials = client.NewAPIKeyStaticCredentials(string(a.cfg.Temporal.APIKey))
	}
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w", a.cfg.Temporal.Address, err)
	}
	a.temporal = c
	return nil
}

// dialBrokers connects to every configured broker and routes topics to them.
func (a *app) dialBrokers() error {
	var dialed []mq.Broker
	closeAll := func() {
		for _, b := range dialed {
			_ = b.Publisher.Close()
		}
	}
	for _, spec := range a.cfg.brokerSpecs() {
		pub, err := brokers.DialNamed(spec.URL, brokers.DefaultClientName)
		if err != nil {
			closeAll()
			return fmt.Errorf("broker %q: %w", spec.Name, err)
		}
		dialed = append(dialed, mq.Broker{Name: spec.Name, Addr: mq.RedactURL(spec.URL), Publisher: pub})
	}
	names := make([]string, len(dialed))
	for i, b := range dialed {
		names[i] = b.Name
	}
	r, err := mq.NewRouter(mq.RouterConfig{
		Brokers:     dialed,
		Routes:      a.cfg.Brokers.Routes,
		Default:     a.cfg.Brokers.Default,
		MaxInFlight: a.cfg.Brokers.MaxInFlight,
		Observer:    metrics.NewBrokers(a.reg, names),
		Logger:      a.log,
	})
	if err != nil {
		closeAll()
		return err
	}
	a.pub = r
	return nil
}

// brokerChecks probes each broker for /readyz as "mq:<name>". They are optional: a broker
// that is down delays only its own records, so it does not take the gateway out of service.
func (a *app) brokerChecks() []gateway.Check {
	var out []gateway.Check
	for _, name := range a.pub.Names() {
		out = append(out, gateway.Check{Name: "mq:" + name, Optional: true,
			Probe: func(ctx context.Context) error { return a.pub.PingBroker(ctx, name) }})
	}
	return out
}

// startWorker builds and starts the worker from the configuration, on courier's own database.
func (a *app) startWorker(ctx context.Context) (*worker.Worker, error) {
	paused, err := a.pauseWatcher(ctx)
	if err != nil {
		return nil, err
	}
	// Timers read their business type at every fire and delivery: from memory, dropped on change.
	bizTypes := a.store.NewBizTypeCache(0, a.log)
	a.closers = append(a.closers, bizTypes)
	return worker.Start(ctx, worker.Config{
		Relay: relay.Config{
			BatchSize:     a.cfg.Outbox.BatchSize,
			PollInterval:  a.cfg.Outbox.PollInterval,
			StartWorkers:  a.cfg.Outbox.StartWorkers,
			Lease:         a.cfg.Outbox.Lease,
			SentRetention: a.cfg.Outbox.Retention,
			Retry:         a.cfg.Outbox.Retry,
			Batch:         a.cfg.Outbox.Batch,
			Ordered:       a.cfg.Outbox.Ordered,
		},
		ShutdownTimeout:        a.cfg.ShutdownTimeout,
		AllowLoopbackCallbacks: a.dev || a.cfg.AllowLoopback,
		Namespace:              a.cfg.Temporal.Namespace,
		Tasks:                  a.cfg.Tasks,
	}, worker.Deps{
		Temporal:     a.temporal,
		Sources:      a.sources,
		Publisher:    a.pub,
		Metrics:      metrics.NewOutbox(a.reg),
		Logger:       a.log,
		BizTypes:     bizTypes,
		TimerRows:    a.store,
		TimerMetrics: metrics.NewTimers(a.reg),
		Tasks:        a.store,
		TaskMetrics:  a.tasksMetrics(),
		Pauses:       paused,
	})
}

// newGateway builds the gateway; wake and wakeTasks nudge an in-process relay and task
// claimer (nil in a gateway-only process).
func (a *app) newGateway(wake, wakeTasks func()) http.Handler {
	extra := map[string]gateway.OutboxStore{}
	for _, src := range a.sources {
		a.reg.MustRegister(metrics.NewOutboxTableCollector(src.Name, atScrape(tableStats(src.Store))))
		if src.Name != courier.DefaultSource {
			extra[src.Name] = src.Store
		}
	}
	svc := timers.New(a.temporal, a.cfg.Temporal.Namespace, a.store, a.store, relay.DefaultTaskQueue)
	a.reg.MustRegister(metrics.NewTimerStateCollector(atScrape(svc.CountByState)))
	a.reg.MustRegister(metrics.NewTaskTableCollector(taskStatuses(), atScrape(taskStats(a.store))))
	a.reg.MustRegister(metrics.NewTaskBacklogCollector(atScrape(func(ctx context.Context) ([]courier.QueueBacklog, error) {
		return a.store.QueueBacklogs(ctx, time.Now())
	})))
	pauseSvc := pauses.NewService(a.store, a.log)
	pauseSvc.OnChange(func(context.Context, courier.Pause, bool) {
		if a.watcher != nil { // a worker in this process: it sees the change now
			a.watcher.Kick()
		}
	})
	a.reg.MustRegister(metrics.NewPausedCollector(atScrape(a.store.ListPauses)))
	// A worker in this process (courier dev): its pollers and loops are the process's readiness too.
	checks := append(a.dependencyChecks(), a.workerChecks...)
	a.gatewayHealth(checks)
	console := gateway.ConsoleConfig{Disabled: !a.cfg.Console, TemporalUIURL: a.cfg.TemporalUIURL, Namespace: a.cfg.Temporal.Namespace}
	return gateway.New(gateway.Config{MaxBodyBytes: a.cfg.MaxBodyBytes, RequestTimeout: a.cfg.RequestTimeout, KeyRate: a.cfg.KeyRate, Console: console}, gateway.Deps{
		Tasks:     tasks.NewService(a.store, a.temporal, a.cfg.Temporal.Namespace, wakeTasks, a.tasksMetrics(), a.log),
		Keys:      a.store,
		Outbox:    a.store,
		Runs:      relay.DeliveryRuns{Temporal: a.temporal},
		Sources:   extra,
		BizTypes:  a.store,
		Secrets:   a.store,
		Timers:    svc,
		Schedules: svc,
		Checks:    checks,
		Gatherer:  a.reg,
		Admission: metrics.NewAdmission(a.reg),
		Wake:      wake,
		Logger:    a.log,

		Overview:      a.store,
		TimerOverview: svc,
		Pauses:        pauseSvc,
	})
}

// scrapeTimeout bounds one read of a scrape-time collector.
const scrapeTimeout = 5 * time.Second

// atScrape is read as a scrape-time collector calls it: each call on its own context, bounded
// by scrapeTimeout.
func atScrape[T any](read func(context.Context) (T, error)) func() (T, error) {
	return func() (T, error) {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		defer cancel()
		return read(ctx)
	}
}

// tableStats reads one outbox table for the scrape-time gauges.
func tableStats(st *store.Store) func(context.Context) (metrics.OutboxTableStats, error) {
	return func(ctx context.Context) (metrics.OutboxTableStats, error) {
		s, err := st.OutboxStats(ctx)
		if err != nil {
			return metrics.OutboxTableStats{}, err
		}
		out := metrics.OutboxTableStats{ByStatus: map[string]int64{}, BlockedKeys: s.BlockedKeys}
		for k, v := range s.ByStatus {
			out.ByStatus[string(k)] = v
		}
		if s.OldestUnsent != nil {
			out.OldestUnsent = time.Since(*s.OldestUnsent).Seconds()
		}
		return out, nil
	}
}

func taskStatuses() []string {
	out := make([]string, len(courier.TaskStatuses))
	for i, s := range courier.TaskStatuses {
		out[i] = string(s)
	}
	return out
}

// taskStats reads the task tables for the scrape-time gauges.
func taskStats(st *store.Store) func(context.Context) (metrics.TaskTableStats, error) {
	return func(ctx context.Context) (metrics.TaskTableStats, error) {
		s, err := st.TaskStats(ctx)
		if err != nil {
			return metrics.TaskTableStats{}, err
		}
		out := metrics.TaskTableStats{ByQueueStatus: map[string]map[string]int64{}, InFlight: s.InFlight, Limit: s.Limit}
		for q, by := range s.ByQueueStatus {
			out.ByQueueStatus[q] = map[string]int64{}
			for k, v := range by {
				out.ByQueueStatus[q][string(k)] = v
			}
		}
		return out, nil
	}
}

func (a *app) close() {
	if a.pub != nil {
		_ = a.pub.Close()
	}
	if a.temporal != nil {
		a.temporal.Close()
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i].Close()
	}
}

// listen binds addr, turning "address in use" into one clear line.
func listen(addr, what, flagName string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: port %s is already in use (set %s)", what, addr, flagName)
	}
	return ln, err
}

// serve runs an HTTP server on ln until ctx ends, then shuts it down gracefully within
// shutdown. A client gets 10 s to send its headers and 30 s for the whole request; the
// response must be written within the request timeout plus 10 s (handlers answer 503 when
// their work passes the request timeout); idle keep-alive connections close after 2 min.
func serve(ctx context.Context, ln net.Listener, h http.Handler, requestTimeout, shutdown time.Duration, log *slog.Logger) <-chan error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      requestTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdown)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("HTTP shutdown", "error", err)
		}
	}()
	return done
}
