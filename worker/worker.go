package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/health"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/pauses"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/timers"
)

// Defaults of Config, applied to its zero fields; courier's flags take theirs from here (the
// relay's, the tasks' and the timer service's are relay's, tasks' and timers' own).
const (
	// DefaultShutdownTimeout is how long Stop lets in-flight activities finish.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxConcurrentActivities is the activity slots on the workflows' own task queue
	// (publishes are I/O bound).
	DefaultMaxConcurrentActivities = 200
	// DefaultBizTypeRefresh is how often business types are re-read.
	DefaultBizTypeRefresh = 5 * time.Second
)

// StickyScheduleToStart is how long the engine holds a run's next workflow task for the
// worker that ran its last one (which has the run in its cache) before it gives the task to any
// worker, which must then replay the run's whole history. The SDK's default is 5 s. Under
// overload the engine itself hands such tasks over late: with 5 s, 1,500 outbox records offered
// at 400/s (four times what the engine completes here) saw runs' last workflow tasks time out on
// their worker's queue, go to the shared one and wait there again, so runs closed up to 58 s
// after their record was published, each with a replay that only added to the load. With 20 s
// the last run closed 3.5–6 s after the last record (docs/benchmarks-history.md, fifth round). A worker
// that stops hands its queue back at once; one that dies is given up by the engine as soon as
// its queue has had no poll for 10 s, so only tasks already waiting for it when it died wait
// the full 20 s.
const StickyScheduleToStart = 20 * time.Second

// Config tunes the worker. Zero fields take the documented defaults.
type Config struct {
	Relay relay.Config // outbox relay; its TaskQueue is also the delivery workflows' queue
	// ShutdownTimeout bounds how long Stop lets in-flight activities finish; default
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MaxConcurrentActivities per process on the workflows' own task queue (outbox deliveries
	// and dead-marking); default DefaultMaxConcurrentActivities.
	MaxConcurrentActivities int
	// DisableRelay runs the Temporal worker without claiming outbox rows (for tests and for
	// deployments that separate the two).
	DisableRelay bool
	// AllowLoopbackCallbacks lets timer callbacks reach 127.0.0.1 (courier dev only).
	AllowLoopbackCallbacks bool
	// Namespace is the Temporal namespace (for listing timers); default "courier".
	Namespace string
	// Tasks tunes prioritized tasks (tasks.Config); its PublicURL is required for tasks to run.
	Tasks tasks.Config
	// BizTypeRefresh is how often the worker re-reads business types to start, restart or stop
	// their delivery workers; default DefaultBizTypeRefresh.
	BizTypeRefresh time.Duration
}

// Deps are the worker's collaborators.
type Deps struct {
	Temporal  client.Client
	Sources   []relay.Source // outbox sources; the one named "default" is courier's database
	Publisher mq.Publisher
	Metrics   *metrics.Outbox // nil records nothing
	// TimerMetrics counts timer deliveries; nil records nothing.
	TimerMetrics *metrics.Timers
	Logger       *slog.Logger
	// Tasks enables prioritized tasks; nil disables them.
	Tasks TaskStore
	// TaskMetrics counts task pushes and results; nil records nothing.
	TaskMetrics *metrics.Tasks
	// BizTypes enables timers: their delivery settings are read from it. Nil disables them.
	BizTypes interface {
		BizTypeLister
		activities.BizTypeStore
	}
	// TimerRows keeps the timers' rows (courier's store): bucketed timers, and the rows that
	// decide the cancel and reschedule of timers of their own. Nil: business types in the
	// bucketed mode are refused, and timers of their own live in Temporal only (reschedule and
	// cancel then need a running worker).
	TimerRows TimerRowStore
	// Pauses are the pauses in force (docs/flow-control.md), read before each push, delivery
	// and publish; nil: nothing is ever paused.
	Pauses *pauses.Watcher
}

// TimerRowStore is what timers need from courier's database: their rows, their sweep, the
// token buckets of the bucketed mode's delivery rate, and what the runs follow the rows with.
type TimerRowStore interface {
	timers.TimerRows
	timers.SweepRows
	activities.TimerRowStore
	activities.TimerRunStore
}

// Worker is a running (or startable) courier worker.
type Worker struct {
	cfg    Config
	deps   Deps
	tw     sdkworker.Worker
	relay  *relay.Relay
	biz    *bizWorkers
	sweep  *timers.Sweeper // bucketed timers' sweep; nil without them
	claim  *tasks.Claimer
	cancel context.CancelFunc
	done   chan struct{}
	// taskWorkers serve the push and finish task queues (nil without tasks).
	taskWorkers []sdkworker.Worker
	pollers     pollerState
	loops       []*health.Loop // the relay's per source, then the claimer's
}

// New builds a worker; Start runs it. Each component (the outbox, tasks, timers) registers
// its workflows and activities on the workers it runs on in one function of its own
// (registerOutbox, newTaskWorkers, registerTimers).
func New(cfg Config, d Deps) (*Worker, error) {
	if d.Temporal == nil || d.Publisher == nil || len(d.Sources) == 0 {
		return nil, fmt.Errorf("worker: Temporal client, publisher and at least one outbox source are required")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Publisher = mq.Traced(d.Publisher) // a span per publish; the message carries its traceparent
	defaults.UnlessPositive(&cfg.ShutdownTimeout, DefaultShutdownTimeout)
	defaults.UnlessPositive(&cfg.MaxConcurrentActivities, DefaultMaxConcurrentActivities)
	defaults.UnlessPositive(&cfg.BizTypeRefresh, DefaultBizTypeRefresh)
	defaults.IfZero(&cfg.Relay.TaskQueue, relay.DefaultTaskQueue)
	cfg.Tasks = cfg.Tasks.WithDefaults()
	queue := cfg.Relay.TaskQueue // set once here: the relay, claimer, timers and sweeper all use it
	w := &Worker{cfg: cfg, deps: d}
	opts := workflowsWorkerOptions(cfg)
	opts.OnFatalError = w.pollers.fail
	w.tw = sdkworker.New(d.Temporal, queue, opts)
	stores := map[string]activities.OutboxStore{}
	for _, s := range d.Sources {
		stores[s.Name] = s.Store
	}
	outboxActs := activities.NewOutbox(stores, d.Publisher, d.Metrics)
	rd := relay.Deps{Sources: d.Sources, Logger: d.Logger}
	if d.Pauses != nil {
		outboxActs.WithPauses(d.Pauses.Current)
		rd.Paused = d.Pauses.Current
	}
	registerOutbox(w.tw, outboxActs)
	var claimerLoop *health.Loop
	if d.Tasks != nil {
		w.claim = tasks.NewClaimer(d.Tasks, d.Temporal, queue, cfg.Tasks, d.Logger)
		w.claim.SetMetrics(d.TaskMetrics)
		if !cfg.Tasks.DisableClaimer {
			loop := health.NewLoop("claimer", cfg.Tasks.PollInterval, nil)
			w.claim.OnTurn(loop.Turned)
			claimerLoop = loop
		}
		w.taskWorkers = newTaskWorkers(d.Temporal, w.tw, queue, cfg, w.pollers.fail, activities.TasksDeps{Store: d.Tasks,
			PublicURL: cfg.Tasks.PublicURL, AllowLoopback: cfg.AllowLoopbackCallbacks, Workflows: d.Temporal,
			RetryPush: w.claim.StartPushRetry, Metrics: d.TaskMetrics, Wake: w.claim.Wake})
		if d.Pauses != nil {
			// The claim reads the pauses itself; a resume read here wakes this claimer at once
			// (on SQLite there is no notification of it), even the resume of a pause the
			// watcher never saw in force, which a claim may have met meanwhile.
			d.Pauses.OnChange(func(before, after courier.Pauses) { w.claim.Wake() })
		}
		if ins, ok := d.Tasks.(relay.TaskInserter); ok { // courier's store is: rows of outbox.InsertTask
			rd.Tasks, rd.WakeTasks = ins, w.claim.Wake
		}
	}
	if d.BizTypes != nil {
		var rows timers.TimerRows
		if d.TimerRows != nil {
			rows = d.TimerRows
		}
		svc := timers.New(d.Temporal, cfg.Namespace, d.BizTypes, rows, queue)
		svc.Logger = d.Logger
		timerActs := activities.NewTimers(d.BizTypes, d.Publisher, cfg.AllowLoopbackCallbacks, d.TimerMetrics)
		var bucketActs *activities.TimerBuckets
		var runActs *activities.TimerRuns
		if d.TimerRows != nil {
			bucketActs = activities.NewTimerBuckets(d.TimerRows, d.Publisher, svc, cfg.AllowLoopbackCallbacks, d.TimerMetrics)
			runActs = activities.NewTimerRuns(d.TimerRows, timerActs.LoadBizType)
			runActs.ArmsBucketsWith(svc.ArmBucket)
			w.sweep = timers.NewSweeper(svc, d.TimerRows, 0, d.Logger)
		}
		registerTimers(w.tw, timerActs, bucketActs, runActs)
		w.biz = &bizWorkers{tc: d.Temporal, types: d.BizTypes, timers: timerActs, buckets: bucketActs, refresh: cfg.BizTypeRefresh,
			stopTimeout: cfg.ShutdownTimeout, log: d.Logger, kick: make(chan struct{}, 1), running: map[string]runningBiz{}, onFatal: w.pollers.fail}
		if d.Pauses != nil {
			w.biz.paused = d.Pauses.Current
			d.Pauses.OnChange(func(before, after courier.Pauses) { w.biz.wake() })
		}
		rd.Timers = svc
	}
	if !cfg.DisableRelay {
		bySource := map[string]*health.Loop{}
		for _, src := range d.Sources {
			loop := health.NewLoop("relay:"+src.Name, cfg.Relay.PollInterval, nil)
			bySource[src.Name] = loop
			w.loops = append(w.loops, loop)
		}
		rd.Turned = func(source string, completed bool) {
			if l := bySource[source]; l != nil {
				l.Turned(completed)
			}
		}
	}
	if claimerLoop != nil {
		w.loops = append(w.loops, claimerLoop)
	}
	w.relay = relay.New(d.Temporal, cfg.Relay, rd)
	if d.Pauses != nil {
		// A resumed topic's records are claimed at once, not at the next poll.
		d.Pauses.OnChange(func(before, after courier.Pauses) { w.relay.Wake() })
	}
	return w, nil
}

// Start builds a worker from its configuration and collaborators and starts it (New, then
// (*Worker).Start): the one assembly that `courier worker`, `courier dev`, the bench and the
// tests share, so that they differ only in cfg and d. Stop it with Stop.
func Start(ctx context.Context, cfg Config, d Deps) (*Worker, error) {
	w, err := New(cfg, d)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// DefaultSources is courier's own database as a worker's outbox sources: the one named
// courier.DefaultSource.
func DefaultSources(st *store.Store) []relay.Source {
	return []relay.Source{{Name: courier.DefaultSource, Store: st}}
}

// workflowsWorkerOptions are those of the worker on the workflows' own queue.
func workflowsWorkerOptions(cfg Config) sdkworker.Options {
	return sdkworker.Options{
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		MaxConcurrentActivityExecutionSize: cfg.MaxConcurrentActivities,
		// Local activities keep the SDK's 1,000 slots: an outbox record's first attempt (a local
		// activity of its delivery run) shares them with the timers' business-type reads, which
		// must not wait long for one. Publishes at once are bounded per broker by the router's
		// in-flight bound (mq.Router), which refuses the next one at once.
		// More pollers than the SDK's default of 2: deliveries are short, so the round trip of
		// a poll, not the work, is what bounds throughput.
		MaxConcurrentWorkflowTaskPollers: 8,
		MaxConcurrentActivityTaskPollers: 8,
		StickyScheduleToStartTimeout:     StickyScheduleToStart,
	}
}

// Loops are the worker's claim loops (the relay's, one per outbox source, and the task
// claimer's), whose passes its readiness and metrics follow.
func (w *Worker) Loops() []*health.Loop { return w.loops }

// Checks are the worker's own readiness checks: "pollers" (its Temporal workers are started,
// not stopped, and none has stopped on a fatal error, such as a namespace that does not exist)
// and each loop's (health.Loop.Check; optional for the outbox sources other than courier's
// own database). The process adds its dependencies' (Temporal, the
// databases).
func (w *Worker) Checks() []health.Check {
	out := []health.Check{{Name: "pollers", Probe: func(context.Context) error { return w.pollers.err() }}}
	for _, l := range w.loops {
		c := l.Check()
		// A producer's own outbox database that is down delays only its records, like a
		// broker: reported, and alerted on (CourierLoopStalled), without making the worker
		// unready.
		c.Optional = strings.HasPrefix(l.Name(), "relay:") && l.Name() != "relay:"+courier.DefaultSource
		out = append(out, c)
	}
	return out
}

// pollerState is what the pollers check reads: set by Start, Stop and the SDK's fatal errors.
type pollerState struct {
	mu               sync.Mutex
	started, stopped bool
	fatal            error
}

// fail records a Temporal worker that stopped on a fatal error (sdkworker.Options.OnFatalError).
func (p *pollerState) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fatal == nil {
		p.fatal = err
	}
}

func (p *pollerState) set(started, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started, p.stopped = started, stopped
}

func (p *pollerState) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.fatal != nil:
		return fmt.Errorf("a Temporal worker stopped: %w", p.fatal)
	case p.stopped:
		return errors.New("the Temporal workers are stopping")
	case !p.started:
		return errors.New("the Temporal workers have not started")
	}
	return nil
}

// WakeTasks nudges the task claimer (for inserts through a gateway in the same process).
func (w *Worker) WakeTasks() {
	if w.claim != nil {
		w.claim.Wake()
	}
}

// Relay exposes the relay (to wake it from the gateway in the same process).
func (w *Worker) Relay() *relay.Relay { return w.relay }

// Start starts the Temporal worker and the relay.
func (w *Worker) Start(ctx context.Context) error {
	if err := w.tw.Start(); err != nil {
		return fmt.Errorf("worker: start Temporal worker: %w", err)
	}
	for i, tw := range w.taskWorkers {
		if err := tw.Start(); err != nil {
			for _, started := range w.taskWorkers[:i] {
				started.Stop()
			}
			w.tw.Stop()
			return fmt.Errorf("worker: start a task activity worker: %w", err)
		}
	}
	if w.claim != nil {
		if err := tasks.EnsureSweeper(ctx, w.deps.Temporal, w.cfg.Relay.TaskQueue, w.cfg.Tasks.SweepEvery); err != nil {
			w.stopTemporal()
			return fmt.Errorf("worker: task sweeper schedule: %w", err)
		}
	}
	w.pollers.set(true, false)
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.done = make(chan struct{})
	var wg sync.WaitGroup
	if !w.cfg.DisableRelay {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.relay.Run(rctx)
		}()
	}
	if w.biz != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.biz.run(rctx)
		}()
	}
	if w.sweep != nil {
		wg.Go(func() { w.sweep.Run(rctx) })
	}
	if w.claim != nil && !w.cfg.Tasks.DisableClaimer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.claim.Run(rctx)
		}()
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return nil
}

// Stop stops claiming new rows, then stops the Temporal worker, letting in-flight activities
// finish for up to ShutdownTimeout. Anything unfinished is retried by Temporal on another
// worker: nothing acknowledged is lost.
func (w *Worker) Stop() {
	w.pollers.set(true, true)
	if w.cancel != nil {
		w.cancel()
		<-w.done
	}
	if w.biz != nil {
		w.biz.stopAll()
	}
	w.stopTemporal()
}

// stopTemporal stops the Temporal workers, each letting its in-flight activities finish for up
// to ShutdownTimeout, at the same time.
func (w *Worker) stopTemporal() {
	var wg sync.WaitGroup
	for _, tw := range append([]sdkworker.Worker{w.tw}, w.taskWorkers...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tw.Stop()
		}()
	}
	wg.Wait()
}

// EnsureSearchAttributes registers courier's search attributes in the namespace if missing. It
// is idempotent and runs on every worker start.
func EnsureSearchAttributes(ctx context.Context, c client.Client, namespace string) error {
	op := c.OperatorService()
	have, err := op.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range courier.SearchAttributes {
		if _, ok := have.GetCustomAttributes()[name]; ok {
			continue
		}
		missing[name] = IndexedValueType(typ)
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = op.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: namespace, SearchAttributes: missing,
	})
	if err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	return nil
}

// IndexedValueType maps courier's search attribute types to Temporal's.
func IndexedValueType(t courier.SearchAttributeType) enumspb.IndexedValueType {
	switch t {
	case courier.SAInt:
		return enumspb.INDEXED_VALUE_TYPE_INT
	case courier.SADatetime:
		return enumspb.INDEXED_VALUE_TYPE_DATETIME
	default:
		return enumspb.INDEXED_VALUE_TYPE_KEYWORD
	}
}
