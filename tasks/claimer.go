package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/dispatch"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/workflows"
)

// ClaimStore is what a claimer needs from the database.
type ClaimStore interface {
	dispatch.ClaimStore
	ListQueues(ctx context.Context) ([]courier.Queue, error)
	UnpushedTasks(ctx context.Context, olderThan time.Duration, limit int) ([]dispatch.Attempt, error)
	ReleaseStaleSlotHolds(ctx context.Context, olderThan time.Duration) (int, error)
	ExpireTimedOutAttempts(ctx context.Context, limit int) (store.Expired, error)
	// Listen calls notify on the database's notifications on channel (store.TasksChannel:
	// tasks of another process may be claimable) until stop is called; a database without
	// notifications does nothing, and the claimer's poll does the work.
	Listen(ctx context.Context, channel string, notify func(), log *slog.Logger) (stop func())
}

// Claimer moves ready tasks into attempt workflows while their queue has free slots. Every
// worker runs one; the limiter row in the database makes them agree on the limit.
type Claimer struct {
	store    ClaimStore
	tc       client.Client
	queue    string // the workflows' task queue; attempts run on courier.TaskPushQueue beside it
	cfg      Config
	log      *slog.Logger
	wake     chan struct{}
	dispatch *dispatch.Dispatcher
	metrics  *metrics.Tasks // nil records nothing
	turned   func(completed bool)

	timer   *time.Timer // a wake when a rate-held queue's next token comes (wakeAfter; Run's goroutine only)
	timerAt time.Time

	starting sync.WaitGroup // batch runs being started (startBatchAsync)
	starts   chan struct{}  // bounds them

	// trickling is set by a pass in which a batched queue's claim drained it with some but
	// fewer than batchedFill tasks: the next gather waits batchedGather (Run's goroutine only).
	trickling bool
}

// batchStartsAtOnce bounds the batch runs one claimer starts at once while it claims on.
const batchStartsAtOnce = 8

// NewClaimer builds a claimer whose attempts run beside the workflows' task queue
// workflowQueue (on courier.TaskPushQueue).
func NewClaimer(s ClaimStore, tc client.Client, workflowQueue string, cfg Config, log *slog.Logger) *Claimer {
	if log == nil {
		log = slog.Default()
	}
	return &Claimer{store: s, tc: tc, queue: workflowQueue, cfg: cfg.WithDefaults(), log: log,
		wake: make(chan struct{}, 1), dispatch: dispatch.New(), starts: make(chan struct{}, batchStartsAtOnce), turned: func(bool) {}}
}

// OnTurn makes the claimer tell f at the end of each pass whether it completed: every queue
// listed and claimed without an error (health.Loop.Turned).
func (c *Claimer) OnTurn(f func(completed bool)) { c.turned = f }

// SetMetrics makes the claimer count the attempts it times out (the batched mode's deadlines)
// in m.
func (c *Claimer) SetMetrics(m *metrics.Tasks) { c.metrics = m }

// Wake asks for a claim pass now (after an insert or a freed slot in this process).
func (c *Claimer) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wakeAfter asks for a claim pass after d, unless one is asked for sooner already.
func (c *Claimer) wakeAfter(d time.Duration) {
	at := time.Now().Add(d)
	if c.timer != nil && !c.timerAt.After(at) && c.timerAt.After(time.Now()) {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer, c.timerAt = time.AfterFunc(d, c.Wake), at
}

// Run claims until ctx ends; it returns nil on cancellation.
func (c *Claimer) Run(ctx context.Context) error {
	stop := c.store.Listen(ctx, store.TasksChannel, c.Wake, c.log)
	defer stop()
	defer c.starting.Wait()
	poll := time.NewTicker(c.cfg.PollInterval)
	defer poll.Stop()
	expire := time.NewTicker(ExpireEvery)
	defer expire.Stop()
	lastRecover := time.Now()
	for {
		c.turned(c.pass(ctx))
		if time.Since(lastRecover) >= c.cfg.RecoverAfter/2 {
			c.recover(ctx)
			lastRecover = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
			// Wakes come with every insert and every freed slot: under a steady stream of
			// them, passes back to back would each claim a task or two (a claim, and in the
			// batched mode a batch run, each). A short gather lets one pass take what came
			// meanwhile; a worker's limit, never its latency, is what it waits for.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(c.gather()):
			}
		case <-poll.C:
		case <-expire.C:
			c.expire(ctx)
		}
	}
}

// claimGather is how long a claimer woken by an insert or a freed slot waits before its pass,
// so that what arrives meanwhile is claimed (and, in the batched mode, pushed) together.
const claimGather = 5 * time.Millisecond

// A batch run costs the same billable actions whatever it pushes (about two), so a batched
// queue whose tasks trickle in (its last claim took every ready task, fewer than batchedFill)
// is gathered for longer, batchedGather, before the next pass: at 1,000 tasks a second a
// claim then takes about 60 tasks instead of 20, for at most batchedGather more from insert
// to push. A queue with a backlog (a claim that found more ready tasks than free slots) is
// claimed as soon as a slot frees: the wait would cost throughput and save nothing.
const (
	batchedFill   = 100
	batchedGather = 50 * time.Millisecond
)

// gather is how long a woken claimer waits before its pass.
func (c *Claimer) gather() time.Duration {
	if c.trickling {
		return batchedGather
	}
	return claimGather
}

// ExpireEvery is how often every claimer times out the batched attempts whose deadline or
// heartbeat timeout has passed: an attempt is timed out within this of its moment, never
// before it (the database's clock decides).
const ExpireEvery = time.Second

// expire times out the batched attempts past their timeout_at, a bounded statement at a time,
// and wakes the claimers for the slots freed.
func (c *Claimer) expire(ctx context.Context) {
	for ctx.Err() == nil {
		e, err := c.store.ExpireTimedOutAttempts(ctx, c.cfg.BatchSize)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("task claimer: time out batched attempts", "error", err)
			}
			return
		}
		if c.metrics != nil {
			for q, n := range e.ByQueue {
				c.metrics.Results.WithLabelValues(q, string(courier.OutcomeTimeout)).Add(float64(n))
			}
		}
		if e.Attempts > 0 {
			c.Wake()
		}
		if e.Attempts < c.cfg.BatchSize {
			return
		}
	}
}

// pass claims every queue's free slots and starts the attempts. It reports whether it
// completed: the queues were listed and every claim succeeded.
func (c *Claimer) pass(ctx context.Context) bool {
	queues, err := c.store.ListQueues(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("task claimer: list queues", "error", err)
			c.wakeAfter(claimRetry)
		}
		return false
	}
	completed := true
	c.trickling = false
	for _, q := range queues {
		if q.PushURL == "" {
			continue // nowhere to push: tasks wait (the claim decides it again in its transaction)
		}
		size := c.cfg.BatchSize
		if q.Batched() {
			size = c.cfg.BatchedClaimSize
		}
		for ctx.Err() == nil {
			claim, err := c.dispatch.Claim(ctx, c.store, q.Name, size)
			if err != nil {
				if ctx.Err() == nil {
					c.log.Warn("task claimer: claim", "queue", q.Name, "error", err)
					c.wakeAfter(claimRetry)
				}
				completed = false
				break
			}
			if q.Batched() && claim.Drained && len(claim.Attempts) > 0 && len(claim.Attempts) < batchedFill {
				c.trickling = true
			}
			if claim.Batch != "" {
				c.startBatchAsync(ctx, q.Name, max(q.PushBatchSize, 1), claim.Batch, claim.Attempts)
			} else if failed := c.start(ctx, claim.Attempts); failed > 0 {
				// Their rows wait in Processing without a push: recover starts them again
				// once they are RecoverAfter old, so come back then, whatever the poll.
				c.wakeAfter(c.cfg.RecoverAfter)
				completed = false
			}
			if claim.NextToken > 0 {
				// The queue's dispatch rate held tasks back: come back for them when its
				// bucket has a token, not only at the next poll.
				c.wakeAfter(claim.NextToken)
			}
			if len(claim.Attempts) < size {
				break
			}
		}
	}
	return completed
}

// recover starts again the workflows of claimed tasks that never reached their push, and
// releases the slots of recorded results whose answer never came (Service.Report).
func (c *Claimer) recover(ctx context.Context) {
	if n, err := c.store.ReleaseStaleSlotHolds(ctx, SlotHoldGrace); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("task claimer: release stale slot holds", "error", err)
		}
	} else if n > 0 {
		c.log.Info("task claimer: released the slots of results never answered", "count", n, "grace", SlotHoldGrace)
		c.Wake()
	}
	stuck, err := c.store.UnpushedTasks(ctx, c.cfg.RecoverAfter, c.cfg.BatchSize)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("task claimer: find unpushed tasks", "error", err)
			c.wakeAfter(c.cfg.RecoverAfter)
		}
		return
	}
	if len(stuck) == 0 {
		return
	}
	c.log.Info("task claimer: restarting attempts that never reached their push", "count", len(stuck))
	var own []dispatch.Attempt
	batches := map[string][]dispatch.Attempt{}
	for _, a := range stuck {
		if a.Batch == "" {
			own = append(own, a)
		} else {
			batches[a.Batch] = append(batches[a.Batch], a)
		}
	}
	failed := c.startAll(ctx, own, true) > 0
	for batch, attempts := range batches {
		// A batch run still open pushes them (the start finds it); a closed one is run again
		// for what it left unpushed, none of which was ever sent: the queue's push_batch_size
		// now groups them.
		if err := c.startBatch(ctx, attempts[0].Queue, 0, batch, attempts); err != nil && ctx.Err() == nil {
			c.log.Warn("task claimer: restart batch", "batch", batch, "attempts", len(attempts), "error", err)
			failed = true
		}
	}
	if failed {
		c.wakeAfter(c.cfg.RecoverAfter)
	}
}

// startBatchAsync starts a claim's batch run while the claimer claims on (a start is a round
// trip to the engine, and the next claim need not wait for it), at most batchStartsAtOnce at
// once. A start that fails leaves the rows in Processing without a push: recover starts the
// batch again once they are RecoverAfter old, and the claimer comes back then.
func (c *Claimer) startBatchAsync(ctx context.Context, queue string, pushBatchSize int, batch string, attempts []dispatch.Attempt) {
	select {
	case c.starts <- struct{}{}:
	case <-ctx.Done():
		return
	}
	c.starting.Add(1)
	go func() {
		defer func() { <-c.starts; c.starting.Done() }()
		if err := c.startBatch(ctx, queue, pushBatchSize, batch, attempts); err != nil && ctx.Err() == nil {
			c.log.Warn("task claimer: start batch", "queue", queue, "batch", batch, "attempts", len(attempts), "error", err)
			time.AfterFunc(c.cfg.RecoverAfter, c.Wake)
		}
	}()
}

// startBatch starts the run that pushes a batched claim's attempts (workflows.TaskBatch), or
// finds it running: its id is the batch's, written on every attempt's row by the claim.
// pushBatchSize is the queue's push_batch_size the claim read (0: the one at the push), fixed
// in the run's input so that a repeat of its push groups the attempts as the first did.
func (c *Claimer) startBatch(ctx context.Context, queue string, pushBatchSize int, batch string, attempts []dispatch.Attempt) error {
	p := contract.PushBatchParams{Queue: queue, Batch: batch, PushBatchSize: pushBatchSize, Attempts: make([]contract.BatchAttempt, len(attempts))}
	for i, a := range attempts {
		p.Attempts[i] = contract.BatchAttempt{TaskID: a.TaskID, Version: a.Version, Attempt: a.Attempt,
			ProcessingTimeout: a.ProcessingTimeout, HeartbeatTimeout: a.HeartbeatTimeout}
		p.PushTimeout = max(p.PushTimeout, a.PushTimeout)
	}
	_, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       batch,
		TaskQueue:                courier.KindTaskBatch.TaskQueue(c.queue),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		EnableEagerStart:         true, // the push runs in this process's worker, without a trip through matching
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindTaskBatch, courier.RunAttributes{TaskQueue: queue}),
	}, courier.KindTaskBatch.Workflow, p)
	return err
}

// StartPushRetry starts, after delay, the run that makes the next try of a batched request
// that failed on the way (p.Try; activities.TasksDeps.RetryPush), or finds it started: its id
// (p.Batch) is written on its attempts' rows by the batch they left.
func (c *Claimer) StartPushRetry(ctx context.Context, p contract.PushBatchParams, delay time.Duration) error {
	_, err := c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       p.Batch,
		TaskQueue:                courier.KindTaskBatch.TaskQueue(c.queue),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StartDelay:               delay,
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindTaskBatch, courier.RunAttributes{TaskQueue: p.Queue}),
	}, courier.KindTaskBatch.Workflow, p)
	return err
}

// claimRetry is how soon a claim pass that failed (the database busy or away) is tried
// again, whatever the poll interval.
const claimRetry = time.Second

// start starts the claimed attempts' runs and returns how many could not be started.
func (c *Claimer) start(ctx context.Context, claimed []dispatch.Attempt) int {
	return c.startAll(ctx, claimed, false)
}

func (c *Claimer) startAll(ctx context.Context, claimed []dispatch.Attempt, recovering bool) int {
	if len(claimed) == 0 {
		return 0
	}
	var failed atomic.Int64
	sem := make(chan struct{}, c.cfg.StartWorkers)
	var wg sync.WaitGroup
	for _, t := range claimed {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := c.startAttempt
			if recovering {
				start = c.restartAttempt
			}
			if err := start(ctx, t); err != nil && ctx.Err() == nil {
				// The row stays in Processing without a push; recover starts it again.
				c.log.Warn("task claimer: start attempt", "task_id", t.TaskID, "version", t.Version, "attempt", t.Attempt, "error", err)
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(failed.Load())
}

// attemptMemo names the attempt a run belongs to, so recovery can tell a run of this attempt
// from a leftover run of an earlier one.
const attemptMemo = "attempt"

// startAttempt starts the workflow run of a freshly claimed attempt. A run still open under the
// same id belongs to an earlier attempt (its outcome is already recorded, or the task was
// cancelled and resubmitted): it is terminated, since every write it could still make is
// guarded by its own attempt number and would change nothing.
func (c *Claimer) startAttempt(ctx context.Context, t dispatch.Attempt) error {
	return c.startRun(ctx, t)
}

// restartAttempt starts again an attempt whose push never happened (its claimer may have died
// between the claim and the start). A run of this very attempt that is still open is left
// alone; a leftover run of an earlier attempt is terminated.
func (c *Claimer) restartAttempt(ctx context.Context, t dispatch.Attempt) error {
	id := courier.TaskWorkflowID(t.TaskID, t.Version)
	d, err := c.tc.DescribeWorkflowExecution(ctx, id, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
	case err != nil:
		return err
	case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		var attempt int
		if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[attemptMemo]; p != nil {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &attempt)
		}
		if attempt == t.Attempt {
			return nil // this attempt's run exists; it pushes when a worker picks it up
		}
	}
	return c.startRun(ctx, t)
}

// startRun starts an attempt's workflow run. A run still open under the task's workflow id
// belongs to an earlier attempt (both callers make sure of that) and is terminated.
func (c *Claimer) startRun(ctx context.Context, t dispatch.Attempt) (err error) {
	ctx, span := traceAttempt(ctx, t)
	defer func() { tracing.End(span, err) }()
	memo := map[string]any{attemptMemo: t.Attempt}
	if !t.Trace.IsZero() {
		memo[memoTraceParent] = t.Trace.Parent
	}
	_, err = c.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       courier.TaskWorkflowID(t.TaskID, t.Version),
		TaskQueue:                courier.KindTask.TaskQueue(c.queue),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		Memo:                     memo,
		// The first workflow task comes back with the start to this process's worker (the
		// claimer runs beside it on the same client), saving a round trip through matching.
		EnableEagerStart: true,
		TypedSearchAttributes: workflows.StartAttributes(courier.KindTask, courier.RunAttributes{TaskID: t.TaskID, TaskVersion: t.Version,
			TaskPriority: t.Priority, TaskQueue: t.Queue}),
		// QuietSuccess: a success writes no state (its Completed status says it); FinalState
		// for a worker from before it during a rolling upgrade.
	}, courier.KindTask.Workflow, workflows.TaskParams{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt, Queue: t.Queue,
		Priority: t.Priority, ProcessingTimeout: t.ProcessingTimeout, HeartbeatTimeout: t.HeartbeatTimeout, PushTimeout: t.PushTimeout,
		FinalState: true, QuietSuccess: true})
	return err
}

// memoSweepEvery is the sweeper run's memo key holding its interval, so a changed interval is
// noticed.
const memoSweepEvery = "every"

// EnsureSweeper starts the sweeper workflow unless it runs (its fixed id keeps exactly one
// across the fleet): a sweep every interval (0: DefaultSweepEvery). A running sweeper with
// another interval is replaced. The schedule that started a sweep a minute before is deleted:
// each of its runs stayed in the namespace's list.
func EnsureSweeper(ctx context.Context, tc client.Client, taskQueue string, every time.Duration) error {
	if every <= 0 {
		every = DefaultSweepEvery
	}
	if err := tc.ScheduleClient().GetHandle(ctx, courier.TaskSweeperID).Delete(ctx); err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			return fmt.Errorf("delete the sweeper's old schedule: %w", err)
		}
	}
	conflict := enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
	if d, err := tc.DescribeWorkflowExecution(ctx, courier.TaskSweeperID, ""); err == nil &&
		d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		var running string
		if p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[memoSweepEvery]; p != nil {
			_ = converter.GetDefaultDataConverter().FromPayload(p, &running)
		}
		if running != every.String() {
			conflict = enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING
		}
	}
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       courier.TaskSweeperID,
		TaskQueue:                courier.KindTaskSweeper.TaskQueue(taskQueue),
		WorkflowIDConflictPolicy: conflict,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		Memo:                     map[string]any{memoSweepEvery: every.String()},
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindTaskSweeper, courier.RunAttributes{}),
	}, courier.KindTaskSweeper.Workflow, contract.SweepParams{Every: every})
	return err
}
