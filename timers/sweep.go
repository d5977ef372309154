package timers

import (
	"context"
	"log/slog"
	"time"

	"github.com/courier-oss/courier"
)

// SweepRows is what the sweep of the timers' rows needs from courier's database.
type SweepRows interface {
	OverdueTimerBuckets(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerBucketRef, error)
	OverdueTimerRuns(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerRecord, error)
	StrandedTimers(ctx context.Context, grace time.Duration, limit int) ([]courier.TimerRecord, error)
	MarkTimerHanded(ctx context.Context, bizType, bizID string) error
	PurgeTimerRecords(ctx context.Context, bizType string, retention time.Duration, limit int) (int64, error)
	ListBizTypes(ctx context.Context) ([]courier.BizType, error)
}

// Sweep timings: how often a worker sweeps, how overdue a timer or how long stranded it must be
// before the sweep acts (its bucket's own run normally takes it well before), and how often
// finished rows are purged, in batches of purgeBatch. A timer of its own is left to its run
// for runOverdueGrace after its fire time (and between two signals of the sweep): the run
// itself claims it, and a signal to a run whose workflow task waits in a backed-up engine
// only adds to the engine's work.
const (
	DefaultSweepEvery = 10 * time.Second
	overdueGrace      = 10 * time.Second
	runOverdueGrace   = 30 * time.Second
	strandedGrace     = 30 * time.Second
	purgeEvery        = time.Minute
	sweepBatch        = 500
	purgeBatch        = 1000
	purgeBatchesMax   = 20
)

// Sweeper finds timers with rows that nothing is delivering and hands them on, and purges
// finished rows past their type's retention. Every worker runs one: each step is idempotent
// (a bucket armed twice keeps one run, a hand-over repeated while its run is open is a no-op,
// a run signalled twice applies the change once), so no leader is needed.
type Sweeper struct {
	svc   *Service
	rows  SweepRows
	every time.Duration
	log   *slog.Logger
}

// NewSweeper builds the sweep; every is how often it runs (0: DefaultSweepEvery).
func NewSweeper(svc *Service, rows SweepRows, every time.Duration, log *slog.Logger) *Sweeper {
	if every <= 0 {
		every = DefaultSweepEvery
	}
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{svc: svc, rows: rows, every: every, log: log}
}

// Run sweeps every interval until ctx ends.
func (w *Sweeper) Run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	var lastPurge time.Time
	for {
		w.Sweep(ctx)
		if time.Since(lastPurge) >= purgeEvery {
			w.Purge(ctx)
			lastPurge = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sweep arms the buckets of overdue timers (a crash between a timer's insert and its bucket's
// start, or a bucket whose run ended before they were due), starts the runs of stranded
// ones (redelivered, but their run never started), and signals (or starts) the runs of
// overdue timers of their own (a start that was lost, a signal moving the fire time earlier
// that was lost, or an engine that far behind). It returns how many buckets and stranded
// timers it found.
func (w *Sweeper) Sweep(ctx context.Context) (buckets, stranded int) {
	runs, err := w.rows.OverdueTimerRuns(ctx, runOverdueGrace, sweepBatch)
	if err != nil {
		w.warn(ctx, "listing overdue timers of their own failed", err)
	}
	for _, r := range runs {
		w.svc.tellRun(ctx, r)
	}
	if len(runs) > 0 {
		w.log.InfoContext(ctx, "signalled the runs of overdue timers", "timers", len(runs))
	}
	refs, err := w.rows.OverdueTimerBuckets(ctx, overdueGrace, sweepBatch)
	if err != nil {
		w.warn(ctx, "listing overdue timer buckets failed", err)
	}
	for _, r := range refs {
		if err := w.svc.ArmBucket(ctx, r.BizType, r.Bucket); err != nil {
			w.warn(ctx, "arming an overdue timer bucket failed", err, "biz_type", r.BizType, "bucket", r.Bucket)
			continue
		}
		buckets++
	}
	if buckets > 0 {
		w.log.InfoContext(ctx, "armed the buckets of overdue timers", "buckets", buckets)
	}
	recs, err := w.rows.StrandedTimers(ctx, strandedGrace, sweepBatch)
	if err != nil {
		w.warn(ctx, "listing stranded timers failed", err)
	}
	for _, r := range recs {
		if err := w.svc.HandOver(ctx, r, r.LastError, false); err != nil {
			w.warn(ctx, "handing a stranded timer to its run failed", err, "biz_type", r.BizType, "biz_id", r.BizID)
			continue
		}
		if err := w.rows.MarkTimerHanded(ctx, r.BizType, r.BizID); err != nil {
			w.warn(ctx, "marking a stranded timer handed failed", err, "biz_type", r.BizType, "biz_id", r.BizID)
			continue
		}
		stranded++
	}
	if stranded > 0 {
		w.log.InfoContext(ctx, "started the runs of stranded timers", "timers", stranded)
	}
	return buckets, stranded
}

// Purge deletes, for each business type, finished timers past its retention, in bounded
// batches, and returns how many it deleted.
func (w *Sweeper) Purge(ctx context.Context) int64 {
	types, err := w.rows.ListBizTypes(ctx)
	if err != nil {
		w.warn(ctx, "listing business types to purge timers failed", err)
		return 0
	}
	var total int64
	for _, b := range types {
		b = b.WithDefaults()
		for range purgeBatchesMax {
			n, err := w.rows.PurgeTimerRecords(ctx, b.Name, b.TimerRetention, purgeBatch)
			if err != nil {
				w.warn(ctx, "purging finished timers failed", err, "biz_type", b.Name)
				break
			}
			total += n
			if n < purgeBatch {
				break
			}
		}
	}
	return total
}

func (w *Sweeper) warn(ctx context.Context, msg string, err error, args ...any) {
	if ctx.Err() != nil {
		return // shutting down
	}
	w.log.WarnContext(ctx, msg, append(args, "error", err)...)
}
