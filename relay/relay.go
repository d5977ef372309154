package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/internal/defaults"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/tracing"
	"github.com/courier-oss/courier/workflows"
)

// Source is one database holding an outbox table. On PostgreSQL the relay also listens for
// the table's notifications (store.Listen), so a committed row is claimed at once rather than
// at the next poll.
type Source struct {
	Name  string       // "default" for courier's own database
	Store *store.Store // the database
}

// Config tunes the relay. Zero fields take the documented defaults.
type Config struct {
	TaskQueue    string        // delivery workflows' task queue; default "courier-outbox"
	BatchSize    int           // rows per claim; default 100
	PollInterval time.Duration // fallback poll; default 1 s
	StartWorkers int           // concurrent workflow starts per claim; default 16
	// Lease is how long a claimed row stays with its relay before another relay re-ensures its
	// delivery workflow exists (covers a relay that crashed between claim and start); default 30 s.
	Lease time.Duration
	Retry courier.RetryPolicy // delivery budget; default workflows.DefaultOutboxRetry
	// OrphanCheck is how long after its delivery started a row is looked at again, to re-ensure
	// its workflow still exists (an idempotent start); default 1 h.
	OrphanCheck time.Duration
	// SentRetention is how long sent rows are kept before the relay deletes them in bounded
	// batches; default 7 days; negative keeps them forever.
	SentRetention time.Duration
	// Batch opts sources and topics into the batch mode (docs/outbox.md, "Batch mode"); its
	// zero value batches nothing: one delivery workflow per record.
	Batch BatchConfig
	// Ordered opts sources and topics into the ordered mode (docs/flow-control.md, "Ordered
	// keys in the outbox"); its zero value orders nothing.
	Ordered OrderedConfig
}

// OrderedConfig says which keyed records the relay delivers in commit order per key: one
// delivery per key at a time (workflows.OutboxOrdered) instead of one per record. A record
// without a key is never ordered.
type OrderedConfig struct {
	Sources []string // every keyed record of these sources
	// Topics: keyed records whose topic matches one of these patterns, across all sources.
	// A pattern must be one SQL matches exactly (store.TopicPatternExact).
	Topics []string
	// Max is the most records one claim of a key takes and publishes, one after another, in
	// one activity; default 100 (the batch mode's Max for a source or topic that batches).
	Max int
}

// DefaultOrderedMax is how many of a key's records one claim takes unless configured.
const DefaultOrderedMax = 100

// Check refuses topic patterns that break the topic rule or that a claim cannot match exactly.
func (o OrderedConfig) Check() error {
	for _, p := range o.Topics {
		if err := courier.CheckTopicPattern("ordered topic pattern", p); err != nil {
			return err
		}
		if !store.TopicPatternExact(p) {
			return courier.Errorf(courier.CodeValidation, "ordered topic pattern %q: a literal token after a '*' in a pattern ending in '>' is not supported; list the patterns it stands for", p)
		}
	}
	return nil
}

// scope is the ordered scope of a source.
func (o OrderedConfig) scope(source string) courier.OrderedScope {
	return courier.OrderedScope{All: slices.Contains(o.Sources, source), Topics: o.Topics}
}

// BatchConfig says which records the relay delivers in batches: one workflow per claimed batch
// instead of one per record.
type BatchConfig struct {
	Sources []string // every record of these sources
	Topics  []string // records whose topic matches one of these patterns (courier.MatchTopic)
	// Max is the most records one claim takes, and so one batch holds, from a source that
	// batches; default 1,000.
	Max int
	// Linger is how long after a claim that started a batch workflow the source's next claim
	// waits (measured from the start of that claim): records committed meanwhile go out
	// together, so a steady trickle costs one workflow per Linger rather than one per claim.
	// A claim that started no batch is followed by no wait. Default 20 ms.
	Linger time.Duration
}

// Batch mode defaults (BatchConfig).
const (
	DefaultBatchMax    = 1000
	DefaultBatchLinger = 20 * time.Millisecond
)

// Check refuses topic patterns that break the topic rule.
func (b BatchConfig) Check() error {
	for _, p := range b.Topics {
		if err := courier.CheckTopicPattern("batch topic pattern", p); err != nil {
			return err
		}
	}
	return nil
}

// on reports whether source batches any records.
func (b BatchConfig) on(source string) bool {
	return len(b.Topics) > 0 || slices.Contains(b.Sources, source)
}

// batches reports whether rec from source goes out in a batch: the source or its topic opted in,
// and it has had no attempt yet (a record that failed in a batch, or was redriven, gets a
// delivery of its own).
func (b BatchConfig) batches(source string, rec store.ClaimedRecord) bool {
	if rec.Attempts > 0 {
		return false
	}
	if slices.Contains(b.Sources, source) {
		return true
	}
	for _, p := range b.Topics {
		if courier.MatchTopic(p, rec.Topic) {
			return true
		}
	}
	return false
}

// Defaults of Config, applied to its zero fields; courier's flags take theirs from here.
const (
	// DefaultTaskQueue is where delivery workflows run unless configured otherwise.
	DefaultTaskQueue = courier.DefaultWorkflowQueue
	// DefaultBatchSize is how many rows one claim takes.
	DefaultBatchSize = 100
	// DefaultPollInterval is the fallback poll when no notification wakes the relay.
	DefaultPollInterval = time.Second
	// DefaultStartWorkers is how many workflow starts one claim runs at once: enough to hide
	// the round trip of each start to a Temporal cluster over the network.
	DefaultStartWorkers = 16
	// EmbeddedStartWorkers is the same for an engine in the same process (`courier dev`, the
	// bench), whose starts cost CPU rather than a round trip: more at once only let the relay
	// start runs faster than the engine closes those it has (docs/deployment.md).
	EmbeddedStartWorkers = 2
	// DefaultLease is how long a claimed row stays with its relay before any relay re-ensures
	// its delivery workflow.
	DefaultLease = 30 * time.Second
	// DefaultOrphanCheck is how long after its delivery started a row is looked at again.
	DefaultOrphanCheck = time.Hour
	// DefaultSentRetention is how long sent rows are kept.
	DefaultSentRetention = 7 * 24 * time.Hour
)

func (c Config) withDefaults() Config {
	defaults.IfZero(&c.TaskQueue, DefaultTaskQueue)
	defaults.UnlessPositive(&c.BatchSize, DefaultBatchSize)
	defaults.UnlessPositive(&c.PollInterval, DefaultPollInterval)
	defaults.UnlessPositive(&c.StartWorkers, DefaultStartWorkers)
	defaults.UnlessPositive(&c.Lease, DefaultLease)
	defaults.UnlessPositive(&c.OrphanCheck, DefaultOrphanCheck)
	defaults.IfZero(&c.SentRetention, DefaultSentRetention)
	defaults.UnlessPositive(&c.Batch.Max, DefaultBatchMax)
	defaults.UnlessPositive(&c.Batch.Linger, DefaultBatchLinger)
	if c.Ordered.Max <= 0 {
		c.Ordered.Max = DefaultOrderedMax
		if len(c.Batch.Sources)+len(c.Batch.Topics) > 0 {
			c.Ordered.Max = max(c.Ordered.Max, c.Batch.Max)
		}
	}
	c.Retry = workflows.OutboxRetry(c.Retry)
	return c
}

// TimerArmer creates timers for rows on outbox.TimerTopic (the timer service).
type TimerArmer interface {
	Create(ctx context.Context, r api.TimerRequest) (api.Timer, bool, error)
}

// Deps are the relay's collaborators.
type Deps struct {
	Sources []Source // the databases to relay from; the one named "default" is courier's own
	// Tasks inserts the tasks of rows on outbox.TaskTopic (courier's store); nil: such rows go
	// dead ("tasks are not enabled").
	Tasks TaskInserter
	// WakeTasks nudges the task claimers after an insert; nil: none.
	WakeTasks func()
	// Timers arms the timers of rows on outbox.TimerTopic (the timer service); nil: such rows
	// go dead ("timers are not enabled").
	Timers TimerArmer
	// Paused is the pauses in force (pauses.Watcher.Current): records of a paused topic
	// pattern are not claimed; nil: nothing is ever paused.
	Paused func() courier.Pauses
	// Turned hears each source loop's turns: completed says its claim reached the database and
	// Temporal (health.Loop.Turned); nil: no one listens.
	Turned func(source string, completed bool)
	Logger *slog.Logger // nil: slog.Default()
}

// Relay moves committed outbox rows into delivery workflows.
type Relay struct {
	timers    TimerArmer
	tasks     TaskInserter
	wakeTasks func()
	paused    func() courier.Pauses
	turned    func(source string, completed bool)
	tc        client.Client
	cfg       Config
	sources   []Source
	log       *slog.Logger
	wakes     []chan struct{} // one per source, so a nudge reaches each loop exactly once
	marks     sync.WaitGroup  // batch claims' lease marks still in flight (ClaimOnce); Run waits for them
	// after is the timer a source loop lingers on (time.After; tests see the waits without
	// waiting).
	after func(time.Duration) <-chan time.Time
}

// New builds a relay over d's sources.
func New(tc client.Client, cfg Config, d Deps) *Relay {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	wakes := make([]chan struct{}, len(d.Sources))
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	if d.WakeTasks == nil {
		d.WakeTasks = func() {}
	}
	if d.Paused == nil {
		d.Paused = func() courier.Pauses { return courier.NewPauses(nil) }
	}
	if d.Turned == nil {
		d.Turned = func(string, bool) {}
	}
	return &Relay{timers: d.Timers, tasks: d.Tasks, wakeTasks: d.WakeTasks, paused: d.Paused, turned: d.Turned, tc: tc, cfg: cfg.withDefaults(),
		sources: d.Sources, log: d.Logger, wakes: wakes, after: time.After}
}

// Wake nudges every source loop to claim now (for writers in the same process, such as a
// redrive through the gateway in dev mode).
func (r *Relay) Wake() {
	for _, w := range r.wakes {
		select {
		case w <- struct{}{}:
		default: // a nudge is already pending
		}
	}
}

// Run claims until ctx ends. It returns nil on cancellation.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i, src := range r.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.runSource(ctx, src, r.wakes[i])
		}()
	}
	wg.Wait()
	r.marks.Wait()
	return nil
}

func (r *Relay) runSource(ctx context.Context, src Source, wake <-chan struct{}) {
	notify := make(chan struct{}, 1)
	stop := src.Store.Listen(ctx, store.OutboxChannel, func() {
		select {
		case notify <- struct{}{}:
		default: // one pending wake-up is enough
		}
	}, r.log.With("source", src.Name))
	defer stop()
	ticker := time.NewTicker(r.cfg.PollInterval)
	defer ticker.Stop()
	cleanup := time.NewTicker(cleanupEvery)
	defer cleanup.Stop()
	// lastBatch is when the previous claim began, if it started a batch workflow; zero if it
	// did not. Only then does the next claim linger: a claim that batched nothing has no batch
	// to space out, and its per-record rows should not wait.
	var lastBatch time.Time
	// ordered: the ordered mode covers some of src's records; numbered: src's database numbers
	// keyed records at commit (store.TurnOnCommitOrder), turned on by the first pass and ready
	// once the producers that read it off have ended.
	ordered, numbered := r.cfg.Ordered.scope(src.Name).On(), false
	for {
		if !lastBatch.IsZero() {
			// Records committed during the linger go out in the next batch.
			if wait := r.cfg.Batch.Linger - time.Since(lastBatch); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-r.after(wait):
				}
			}
		}
		began := time.Now()
		c, err := r.ClaimOnce(ctx, src)
		if ordered && !numbered {
			// Keys are delivered only once their records are numbered at commit and no
			// producer that read the switch off can still commit: before, the ordered
			// records wait (the claim leaves them out).
			ready, oerr := src.Store.TurnOnCommitOrder(ctx, r.cfg.Ordered.scope(src.Name))
			if oerr != nil && ctx.Err() == nil {
				r.log.Warn("turning on the outbox commit order failed", "source", src.Name, "error", oerr)
			}
			numbered = oerr == nil && ready
		}
		if numbered {
			if oerr := r.startOrdered(ctx, src); oerr != nil && ctx.Err() == nil {
				r.log.Warn("starting ordered keys' deliveries failed", "source", src.Name, "error", oerr)
			}
		}
		lastBatch = time.Time{}
		if c.Batched > 0 {
			lastBatch = began
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("outbox claim failed", "source", src.Name, "error", err)
		}
		r.turned(src.Name, err == nil)
		if err == nil && c.Rows == r.claimLimit(src) {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-notify:
		case <-cleanup.C:
			r.deleteSent(ctx, src)
		case <-wake:
		}
	}
}

// cleanupEvery is how often each relay deletes sent rows past retention.
const cleanupEvery = time.Minute

// deleteSent removes sent rows older than the retention in batches of 1,000, so the hot table
// stays small without one long transaction. Several relays doing it at once is harmless.
func (r *Relay) deleteSent(ctx context.Context, src Source) {
	if r.cfg.SentRetention < 0 {
		return
	}
	before := time.Now().Add(-r.cfg.SentRetention)
	for i := 0; i < 100; i++ {
		n, err := src.Store.DeleteSentOutbox(ctx, before, 1000)
		if err != nil {
			r.log.Warn("deleting sent outbox rows failed", "source", src.Name, "error", err)
			return
		}
		if n < 1000 {
			return
		}
	}
}

// Claim is what one ClaimOnce did.
type Claim struct {
	Rows    int // rows claimed
	Batched int // of those, rows handed to a batch workflow that started (batch mode)
}

// ClaimOnce claims rows from src, up to one claim's limit, and starts their deliveries. Rows
// whose start failed go back to pending shortly after.
func (r *Relay) ClaimOnce(ctx context.Context, src Source) (Claim, error) {
	paused := r.paused()
	claimed, err := src.Store.ClaimOutboxWhere(ctx, r.claimLimit(src), r.cfg.Lease, store.ClaimFilter{
		PausedTopics: paused.TopicPatterns(),
		Ordered:      r.cfg.Ordered.scope(src.Name),
	})
	if err != nil || len(claimed) == 0 {
		return Claim{}, err
	}
	c := Claim{Rows: len(claimed)}
	// A pattern SQL cannot match exactly, or a pause made since the claim began: such rows go
	// back untouched, due again after the hold.
	claimed, held := holdPaused(claimed, paused)
	if len(held) > 0 {
		if err := src.Store.ReleaseOutbox(context.WithoutCancel(ctx), held, HoldDelay); err != nil {
			r.log.Warn("handing back records of a paused topic failed; they wait for their lease", "source", src.Name, "error", err)
		}
	}
	recs, batch := claimed[:0:0], claimed[:0:0]
	for _, rec := range claimed {
		if k, ok := apiRows[rec.Topic]; ok {
			r.applyRow(ctx, src, rec.ID, k)
			continue
		}
		if r.cfg.Batch.batches(src.Name, rec) {
			batch = append(batch, rec)
			continue
		}
		recs = append(recs, rec)
	}
	failed, err := r.start(ctx, src.Name, recs)
	bg := context.WithoutCancel(ctx)
	if len(batch) > 0 {
		if wid, berr := r.startBatch(ctx, src, batch); berr != nil {
			err = errors.Join(err, berr)
			for _, rec := range batch {
				failed = append(failed, rec.ID)
			}
		} else {
			c.Batched = len(batch)
			r.markBatchStarted(bg, src, batch, wid)
		}
	}
	if len(failed) > 0 {
		if rerr := src.Store.ReleaseOutbox(bg, failed, r.cfg.PollInterval); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	failedSet := make(map[int64]bool, len(failed))
	for _, id := range failed {
		failedSet[id] = true
	}
	started := make([]int64, 0, len(recs))
	for _, rec := range recs {
		if !failedSet[rec.ID] {
			started = append(started, rec.ID)
		}
	}
	if len(started) > 0 {
		if merr := src.Store.MarkOutboxStarted(bg, started, r.cfg.OrphanCheck); merr != nil {
			err = errors.Join(err, merr) // harmless: the rows are re-ensured when their lease ends
		}
	}
	return c, err
}

// markBatchStarted moves a started batch's rows from the claim's lease to the orphan check, as
// MarkOutboxStarted does for deliveries of their own, but beside the source's next claim rather
// than before it: the mark is a third statement over the whole claim in the source's serial
// loop (claim, name the batch, start, mark), and the profile of a 30,000-row burn-down on
// PostgreSQL had the loop's 1,000-row UPDATEs as PostgreSQL's busiest statements
// (docs/benchmarks.md, Outbox). Until the mark lands, or if it fails or the process dies first,
// the rows keep the lease (re-ensured when it ends, as after any failed mark). It touches only
// rows still dispatched under this batch's name: a row the batch has already sent, or handed to
// a delivery of its own and a later claim has taken again, keeps what that later step set.
func (r *Relay) markBatchStarted(ctx context.Context, src Source, batch []store.ClaimedRecord, workflowID string) {
	ids := make([]int64, len(batch))
	for i, rec := range batch {
		ids[i] = rec.ID
	}
	r.marks.Add(1)
	go func() {
		defer r.marks.Done()
		if err := src.Store.MarkOutboxBatchStarted(ctx, ids, workflowID, r.cfg.OrphanCheck); err != nil {
			r.log.Warn("moving a started batch's rows to the orphan check failed; they are re-ensured when their lease ends",
				"source", src.Name, "workflow_id", workflowID, "error", err)
		}
	}()
}

// HoldDelay is how long a claimed record of a paused topic waits before a claim may take it
// again (the same as the delivery's hold, activities.HoldDelay).
const HoldDelay = 2 * time.Second

// holdPaused splits claimed records into those to deliver and the ids of those whose topic is
// paused.
func holdPaused(claimed []store.ClaimedRecord, paused courier.Pauses) ([]store.ClaimedRecord, []int64) {
	if len(paused.TopicPatterns()) == 0 {
		return claimed, nil
	}
	var held []int64
	keep := claimed[:0:0]
	for _, rec := range claimed {
		if _, ok := paused.Topic(rec.Topic); ok {
			held = append(held, rec.ID)
			continue
		}
		keep = append(keep, rec)
	}
	return keep, held
}

// claimLimit is how many rows one claim from src takes.
func (r *Relay) claimLimit(src Source) int {
	if r.cfg.Batch.on(src.Name) {
		return max(r.cfg.BatchSize, r.cfg.Batch.Max)
	}
	return r.cfg.BatchSize
}

// startBatch starts one batch workflow for the records. Its id names the source and the batch's
// first and last record, so a start repeated for the same claim finds the same run. The rows
// name it as theirs before it starts (the run may mark them sent at once), and no longer if
// it could not be started.
func (r *Relay) startBatch(ctx context.Context, src Source, recs []store.ClaimedRecord) (string, error) {
	source := src.Name
	ids := make([]int64, len(recs))
	for i, rec := range recs {
		ids[i] = rec.ID
	}
	wid := courier.OutboxBatchWorkflowID(source, ids[0], ids[len(ids)-1])
	if err := src.Store.AssignOutboxRun(ctx, ids, wid); err != nil {
		return "", fmt.Errorf("name the batch %s on its records: %w", wid, err)
	}
	opts := client.StartWorkflowOptions{
		ID:                       wid,
		TaskQueue:                courier.KindOutboxBatch.TaskQueue(r.cfg.TaskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		EnableEagerStart:         true,
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindOutboxBatch, courier.RunAttributes{Source: source, RecordID: ids[0]}),
	}
	_, err := r.tc.ExecuteWorkflow(ctx, opts, courier.KindOutboxBatch.Workflow, workflows.OutboxBatchParams{
		Source: source, IDs: ids, Retry: r.cfg.Retry,
	})
	if err != nil {
		if cerr := src.Store.AssignOutboxRun(context.WithoutCancel(ctx), ids, ""); cerr != nil {
			r.log.Warn("clearing a batch that did not start from its records failed; their next claim clears it", "source", source, "workflow_id", wid, "error", cerr)
		}
	}
	return wid, err
}

// timerRows arm the timers of rows on outbox.TimerTopic. Creating is idempotent, so a row
// that is armed again after a crash finds the same timer. A request the timer API refuses
// (unknown business type, a different timer under the same id) leaves the row dead.
var timerRows = rowKind{name: "timer", verb: "arming a timer",
	enabled: func(r *Relay) bool { return r.timers != nil },
	refused: []courier.Code{courier.CodeValidation, courier.CodeConflict, courier.CodeTooLarge, courier.CodeInvalid},
	apply:   (*Relay).armTimer}

// armTimer creates the timer of a timer row.
func (r *Relay) armTimer(ctx context.Context, _ Source, rec courier.OutboxRecord) error {
	var row api.TimerRequest
	if err := json.Unmarshal(rec.Payload, &row); err != nil {
		return badRow{"timer row payload is not valid: " + err.Error()}
	}
	// A row arms at its fire time only (outbox.ArmTimer): a delay would be counted from
	// whenever the relay got to the row.
	req := api.TimerRequest{BizType: row.BizType, BizID: row.BizID, Payload: row.Payload}
	if row.FireAt != nil {
		req.When = api.At(*row.FireAt)
	}
	_, _, err := r.timers.Create(ctx, req)
	return err
}

// start starts one delivery per record, concurrently, and returns the ids it could not start.
func (r *Relay) start(ctx context.Context, source string, recs []store.ClaimedRecord) ([]int64, error) {
	var (
		mu     sync.Mutex
		failed []int64
		errs   []error
		wg     sync.WaitGroup
		sem    = make(chan struct{}, r.cfg.StartWorkers)
	)
	for _, rec := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.startOne(ctx, source, rec); err != nil {
				mu.Lock()
				failed = append(failed, rec.ID)
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil, nil
	}
	return failed, fmt.Errorf("%d of %d delivery starts failed; first: %w", len(errs), len(recs), errs[0])
}

func (r *Relay) startOne(ctx context.Context, source string, rec store.ClaimedRecord) (err error) {
	ctx, span := traceRow(ctx, source, rec.ID, rec.Topic, rec.Trace)
	defer func() { tracing.End(span, err) }()
	opts := client.StartWorkflowOptions{
		ID:                       courier.OutboxWorkflowID(source, rec.ID),
		TaskQueue:                courier.KindOutbox.TaskQueue(r.cfg.TaskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// The worker in this process polls this queue on the same client, so the server can
		// hand the first workflow task back in the start's response instead of through
		// matching (docs/benchmarks-history.md, "Engine tuning"). Without a free local slot, or on a
		// run that already exists, the SDK starts normally.
		EnableEagerStart: true,
		TypedSearchAttributes: workflows.StartAttributes(courier.KindOutbox, courier.RunAttributes{Topic: rec.Topic, Source: source,
			RecordID: rec.ID}),
	}
	// QuietSuccess: a sent record's run writes no state (its Completed status says it);
	// FinalState for a worker from before it during a rolling upgrade.
	_, err = r.tc.ExecuteWorkflow(ctx, opts, courier.KindOutbox.Workflow, workflows.OutboxDeliveryParams{
		Source: source, ID: rec.ID, Retry: r.cfg.Retry, FinalState: true, QuietSuccess: true,
	})
	return err
}
