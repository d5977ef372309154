package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/relay"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/timers"
	"github.com/courier-oss/courier/workflows"
)

// Defaults of Config and TasksConfig, applied to their zero fields; courier's flags take theirs
// from here (the relay's and the claimer's are relay's and tasks' own).
const (
	// DefaultShutdownTimeout is how long Stop lets in-flight activities finish.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxConcurrentActivities is the activity slots on the workflows' own task queue
	// (publishes are I/O bound).
	DefaultMaxConcurrentActivities = 200
	// DefaultBizTypeRefresh is how often business types are re-read.
	DefaultBizTypeRefresh = 5 * time.Second
	// DefaultPushSlots is the task pushes one process runs at once.
	DefaultPushSlots = 200
	// DefaultFinishSlots is the result waits, finishes and sweeps one process runs at once.
	DefaultFinishSlots = 100
)

// StickyScheduleToStart is how long the engine holds a run's next workflow task for the
// worker that ran its last one (which has the run in its cache) before it gives the task to any
// worker, which must then replay the run's whole history. The SDK's default is 5 s. Under
// overload the engine itself hands such tasks over late: with 5 s, 1,500 outbox records offered
// at 400/s (four times what the engine completes here) saw runs' last workflow tasks time out on
// their worker's queue, go to the shared one and wait there again, so runs closed up to 58 s
// after their record was published, each with a replay that only added to the load. With 20 s
// the last run closed 3.5–6 s after the last record (docs/benchmarks.md, fifth round). A worker
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
	// MaxConcurrentActivities per process on the workflows' own task queue (outbox deliveries,
	// and what runs recorded before the task queues were split still schedule there); default
	// DefaultMaxConcurrentActivities.
	MaxConcurrentActivities int
	// DisableRelay runs the Temporal worker without claiming outbox rows (for tests and for
	// deployments that separate the two).
	DisableRelay bool
	// AllowLoopbackCallbacks lets timer callbacks reach 127.0.0.1 (courier dev only).
	AllowLoopbackCallbacks bool
	// Namespace is the Temporal namespace (for listing timers); default "courier".
	Namespace string
	// Tasks tunes the task claimer; PublicURL is required for tasks to run.
	Tasks TasksConfig
	// BizTypeRefresh is how often the worker re-reads business types to start, restart or stop
	// their delivery workers; default DefaultBizTypeRefresh.
	BizTypeRefresh time.Duration
}

// TasksConfig tunes prioritized tasks on this worker.
type TasksConfig struct {
	Claimer tasks.ClaimerConfig // TaskQueue is set by the worker
	// PushSlots bounds the pushes this process runs at once, on the push task queue
	// (contract.TaskPushQueue); default DefaultPushSlots. A push holds its slot until the
	// worker answers or its queue's push_timeout passes, so an endpoint that never answers holds
	// at most its queue's concurrency_limit of these slots and none of any other kind.
	PushSlots int
	// FinishSlots bounds the sweeps, and the waits for results and finishes of task code
	// version 1, this process runs at once, on the finish task queue (contract.TaskFinishQueue);
	// default DefaultFinishSlots. They are short: a wait hands its slot back at once, a finish is
	// one transaction. Versions 2 and 3 record outcomes in local activities on the worker that runs the attempt's workflow.
	FinishSlots int
	// PublicURL is the gateway's base URL as task workers reach it (for the result and
	// heartbeat links in every push), such as http://127.0.0.1:8080.
	PublicURL string
	// SweepEvery is the sweeper schedule's interval; default tasks.DefaultSweepEvery.
	SweepEvery time.Duration
	// DisableClaimer runs the task activities without claiming (for tests).
	DisableClaimer bool
}

// TaskStore is what tasks need from courier's database.
type TaskStore interface {
	activities.TaskStore
	tasks.ClaimStore
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
}

// Worker is a running (or startable) courier worker.
type Worker struct {
	cfg    Config
	deps   Deps
	tw     sdkworker.Worker
	relay  *relay.Relay
	biz    *bizWorkers
	claim  *tasks.Claimer
	cancel context.CancelFunc
	done   chan struct{}
	// taskWorkers serve the push and finish task queues (nil without tasks).
	taskWorkers []sdkworker.Worker
}

// New builds a worker; Start runs it.
func New(cfg Config, d Deps) (*Worker, error) {
	if d.Temporal == nil || d.Publisher == nil || len(d.Sources) == 0 {
		return nil, fmt.Errorf("worker: Temporal client, publisher and at least one outbox source are required")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Publisher = mq.Traced(d.Publisher) // a span per publish; the message carries its traceparent
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.MaxConcurrentActivities <= 0 {
		cfg.MaxConcurrentActivities = DefaultMaxConcurrentActivities
	}
	if cfg.Relay.TaskQueue == "" {
		cfg.Relay.TaskQueue = relay.DefaultTaskQueue
	}
	queue := cfg.Relay.TaskQueue // set once here: the relay, claimer, timers and sweeper all use it
	tw := sdkworker.New(d.Temporal, queue, workflowsWorkerOptions(cfg))
	stores := map[string]activities.OutboxStore{}
	for _, s := range d.Sources {
		stores[s.Name] = s.Store
	}
	Register(tw, activities.NewOutbox(stores, d.Publisher, d.Metrics))
	w := &Worker{
		cfg:   cfg,
		deps:  d,
		tw:    tw,
		relay: relay.New(d.Temporal, cfg.Relay, d.Sources, d.Logger),
	}
	if d.Tasks != nil {
		ccfg := cfg.Tasks.Claimer
		ccfg.TaskQueue = queue
		w.claim = tasks.NewClaimer(d.Tasks, d.Temporal, ccfg, d.Logger)
		if ins, ok := d.Tasks.(relay.TaskInserter); ok { // courier's store is: rows of outbox.InsertTask
			w.relay.SetTasks(ins, w.claim.Wake)
		}
		w.taskWorkers = taskWorkers(d.Temporal, queue, cfg, activities.TasksDeps{Store: d.Tasks, PublicURL: cfg.Tasks.PublicURL,
			AllowLoopback: cfg.AllowLoopbackCallbacks, Workflows: d.Temporal, Metrics: d.TaskMetrics, Wake: w.claim.Wake})
	}
	if d.BizTypes != nil {
		timerActs := activities.NewTimers(d.BizTypes, d.Publisher, cfg.AllowLoopbackCallbacks, d.TimerMetrics)
		tw.RegisterActivityWithOptions(timerActs.LoadBizType, activity.RegisterOptions{Name: contract.LoadBizTypeName})
		refresh := cfg.BizTypeRefresh
		if refresh <= 0 {
			refresh = DefaultBizTypeRefresh
		}
		w.relay.SetTimers(timers.New(d.Temporal, cfg.Namespace, d.BizTypes, queue))
		w.biz = &bizWorkers{tc: d.Temporal, types: d.BizTypes, timers: timerActs, refresh: refresh,
			log: d.Logger, running: map[string]runningBiz{}}
	}
	return w, nil
}

// taskWorkers builds the workers of the task activities' own queues: pushes on one, with their
// bound; waits, finishes and sweeps on another, with theirs. A push endpoint that accepts and
// never answers then holds push slots only: outbox deliveries, finishes (which release the
// queue's slots) and sweeps never wait behind it.
func taskWorkers(tc client.Client, workflowQueue string, cfg Config, deps activities.TasksDeps) []sdkworker.Worker {
	pushSlots, finishSlots := cfg.Tasks.PushSlots, cfg.Tasks.FinishSlots
	if pushSlots <= 0 {
		pushSlots = DefaultPushSlots
	}
	if finishSlots <= 0 {
		finishSlots = DefaultFinishSlots
	}
	// The attempts' runs are on the push queue too, so a push-and-wait is handed to this worker
	// with the workflow task that schedules it. Workflow tasks and local activities have slots
	// of their own: the push slots stay pushes'. Local pushes get the same bound.
	deps.LocalPushSlots = pushSlots
	acts := activities.NewTasks(deps)
	push := sdkworker.New(tc, contract.TaskPushQueue(workflowQueue), pushWorkerOptions(cfg, pushSlots))
	push.RegisterWorkflowWithOptions(workflows.Task, workflow.RegisterOptions{Name: workflows.TaskName})
	push.RegisterActivityWithOptions(acts.Finish, activity.RegisterOptions{Name: contract.FinishTaskName}) // the runs' local finish
	push.RegisterActivityWithOptions(acts.PushAwait, activity.RegisterOptions{Name: contract.PushAwaitName})
	push.RegisterActivityWithOptions(acts.SendPush, activity.RegisterOptions{Name: contract.SendPushName})
	finish := sdkworker.New(tc, contract.TaskFinishQueue(workflowQueue), sdkworker.Options{
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		MaxConcurrentActivityExecutionSize: finishSlots,
		MaxConcurrentActivityTaskPollers:   4,
		DisableWorkflowWorker:              true,
	})
	finish.RegisterActivityWithOptions(acts.Sweep, activity.RegisterOptions{Name: contract.SweepTasksName})
	return []sdkworker.Worker{push, finish}
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

// pushWorkerOptions are those of the worker on the task push queue, where the attempts' runs
// are too.
func pushWorkerOptions(cfg Config, pushSlots int) sdkworker.Options {
	return sdkworker.Options{
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		MaxConcurrentActivityExecutionSize: pushSlots,
		MaxConcurrentActivityTaskPollers:   4,
		MaxConcurrentWorkflowTaskPollers:   8,
		StickyScheduleToStartTimeout:       StickyScheduleToStart,
	}
}

// Register registers courier's workflows and the outbox activities under their stable names.
func Register(r sdkworker.Registry, outbox *activities.Outbox) {
	workflows.Register(r)
	if outbox != nil {
		r.RegisterActivityWithOptions(outbox.Deliver, activity.RegisterOptions{Name: contract.DeliverOutboxName})
		r.RegisterActivityWithOptions(outbox.MarkDead, activity.RegisterOptions{Name: contract.MarkOutboxDeadName})
		r.RegisterActivityWithOptions(outbox.PublishBatch, activity.RegisterOptions{Name: contract.PublishOutboxBatchName})
		r.RegisterActivityWithOptions(outbox.HandBatch, activity.RegisterOptions{Name: contract.HandOutboxBatchName})
	}
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
