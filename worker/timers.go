package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// registerTimers registers timers on the workflows' worker: the timer and bucket workflows,
// the business-type read the timer runs make as a local activity, the write of a bucketed
// timer's end into its row, and the local activities through which the runs follow the
// timers' rows (a run's claim, change and end, a bucket's reserve). The deliveries run on each
// business type's own worker (bizWorkers), which registers them in registerTimerDelivery.
// buckets and runs are nil without courier's database.
func registerTimers(r sdkworker.Registry, acts *activities.Timers, buckets *activities.TimerBuckets, runs *activities.TimerRuns) {
	workflows.RegisterTimers(r)
	r.RegisterActivityWithOptions(acts.LoadBizType, activity.RegisterOptions{Name: contract.LoadBizTypeName})
	if buckets != nil {
		r.RegisterActivityWithOptions(buckets.RecordResult, activity.RegisterOptions{Name: contract.RecordTimerResultName})
	}
	if runs != nil {
		r.RegisterActivityWithOptions(runs.ClaimRun, activity.RegisterOptions{Name: contract.ClaimTimerRunName})
		r.RegisterActivityWithOptions(runs.ChangeRow, activity.RegisterOptions{Name: contract.ChangeTimerRowName})
		r.RegisterActivityWithOptions(runs.FinishRun, activity.RegisterOptions{Name: contract.FinishTimerRunName})
		r.RegisterActivityWithOptions(runs.ReserveBatch, activity.RegisterOptions{Name: contract.ReserveTimerBatchName})
	}
}

// registerTimerDelivery registers the timer deliveries on a business type's worker: one timer
// at a time, a bucket's batch, and the event of a timer that failed for good.
func registerTimerDelivery(r sdkworker.Registry, acts *activities.Timers, buckets *activities.TimerBuckets) {
	r.RegisterActivityWithOptions(acts.Deliver, activity.RegisterOptions{Name: contract.DeliverTimerName})
	r.RegisterActivityWithOptions(acts.NotifyFailure, activity.RegisterOptions{Name: contract.NotifyTimerFailureName})
	if buckets != nil {
		r.RegisterActivityWithOptions(buckets.DeliverBatch, activity.RegisterOptions{Name: contract.DeliverTimerBatchName})
	}
}

// BizTypeLister lists the configured business types.
type BizTypeLister interface {
	ListBizTypes(ctx context.Context) ([]courier.BizType, error)
}

// bizWorkers keeps one Temporal worker per business type, on the type's own task queue, so a
// slow or failing type never delays another. Each worker asks the server to hold the queue to
// the type's rate limit (TaskQueueActivitiesPerSecond): the server enforces it across every
// worker on the queue, and every worker reads the same value from the database.
//
// A paused business type has no worker: its deliveries (a timer's, a schedule run's, a
// bucket's batch, a failure event) wait on its queue in Temporal, not started, so no attempt is
// made or counted, and the first poll after the resume takes them. A delivery under way when
// the pause arrives completes (the worker stops gracefully).
type bizWorkers struct {
	tc      client.Client
	types   BizTypeLister
	timers  *activities.Timers
	buckets *activities.TimerBuckets // nil without the bucketed mode
	refresh time.Duration
	// paused reports the business types paused now; nil: none ever is.
	paused func() courier.Pauses
	// stopTimeout is how long a stopping worker lets its deliveries under way finish.
	stopTimeout time.Duration
	log         *slog.Logger
	kick        chan struct{}
	onFatal     func(error) // a business type's Temporal worker stopped on a fatal error

	mu      sync.Mutex
	running map[string]runningBiz
}

// wake makes the workers follow a change at once (a pause or resume) instead of at the next
// refresh. It never blocks.
func (b *bizWorkers) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

type runningBiz struct {
	w    sdkworker.Worker
	rate float64
}

func (b *bizWorkers) run(ctx context.Context) {
	t := time.NewTicker(b.refresh)
	defer t.Stop()
	for {
		b.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
	}
}

// sync starts workers for new types, restarts those whose rate limit changed, and stops those
// of deleted and paused types.
func (b *bizWorkers) sync(ctx context.Context) {
	types, err := b.types.ListBizTypes(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("listing business types failed", "error", err)
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	paused := courier.NewPauses(nil)
	if b.paused != nil {
		paused = b.paused()
	}
	seen := map[string]bool{}
	for _, t := range types {
		if _, ok := paused.BizType(t.Name); ok {
			continue // stopped below, like a deleted type's
		}
		seen[t.Name] = true
		if r, ok := b.running[t.Name]; ok {
			if r.rate == t.RateLimit {
				continue
			}
			r.w.Stop()
			delete(b.running, t.Name)
		}
		opts := sdkworker.Options{MaxConcurrentActivityExecutionSize: 100, WorkerStopTimeout: b.stopTimeout, OnFatalError: b.onFatal}
		if t.RateLimit > 0 {
			// The SDK's 2 pollers: every poll in flight can take a task the moment the server's
			// limiter allows one, so more pollers let bursts past the rate.
			opts.TaskQueueActivitiesPerSecond = t.RateLimit
		} else {
			// Pollers as on the workflows' queue: a delivery is short, so the poll round trip,
			// not the work, bounds how fast fires due at once go out.
			opts.MaxConcurrentActivityTaskPollers = 8
		}
		w := sdkworker.New(b.tc, courier.BizTypeTaskQueue(t.Name), opts)
		registerTimerDelivery(w, b.timers, b.buckets)
		if err := w.Start(); err != nil {
			b.log.Warn("starting the business type's worker failed", "biz_type", t.Name, "error", err)
			continue
		}
		b.running[t.Name] = runningBiz{w: w, rate: t.RateLimit}
	}
	var stopping sync.WaitGroup
	for name, r := range b.running {
		if seen[name] {
			continue
		}
		delete(b.running, name)
		if p, ok := paused.BizType(name); ok {
			b.log.Info("business type paused: its deliveries wait until it is resumed", "biz_type", name, "reason", p.Reason, "paused_by", p.PausedBy)
		}
		stopping.Go(r.w.Stop) // at once: each lets its deliveries under way finish
	}
	stopping.Wait()
}

func (b *bizWorkers) stopAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, r := range b.running {
		r.w.Stop()
		delete(b.running, name)
	}
}
