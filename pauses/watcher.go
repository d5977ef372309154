package pauses

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courier-oss/courier"
)

// DefaultRefresh is how often a Watcher reads the pauses again by itself. On PostgreSQL a
// pause or resume reaches every watcher at its commit (store.PausesChannel); on SQLite, and
// while that connection is down, within this.
const DefaultRefresh = time.Second

// Lister reads the pauses in force (store.Store).
type Lister interface {
	// ReadPauses returns the pauses in force and how many pauses and resumes were ever
	// committed, the count read first (so it never counts a change the list lacks).
	ReadPauses(ctx context.Context) ([]courier.Pause, int64, error)
}

// Watcher keeps the pauses in force in memory: what a worker consults before each push,
// callback and publish. Until its first read it answers that nothing is paused; Start makes
// that read before it returns.
type Watcher struct {
	list    Lister
	refresh time.Duration
	log     *slog.Logger
	kick    chan struct{}
	cur     atomic.Pointer[courier.Pauses]
	changes int64 // the store's count of pauses and resumes at the last read (read's own)

	mu      sync.Mutex
	changed []func(before, after courier.Pauses)
}

// NewWatcher builds a watcher that reads list every refresh (DefaultRefresh when ≤ 0) and when
// kicked. A nil log logs to slog.Default().
func NewWatcher(list Lister, refresh time.Duration, log *slog.Logger) *Watcher {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{list: list, refresh: refresh, log: log, kick: make(chan struct{}, 1)}
	empty := courier.NewPauses(nil)
	w.cur.Store(&empty)
	return w
}

// Current is the set of pauses as last read.
func (w *Watcher) Current() courier.Pauses { return *w.cur.Load() }

// OnChange registers f, called from the watcher's loop whenever a read finds that a pause or
// resume was committed since the last read. That includes a pause made and lifted between two
// reads, when before and after hold the same pauses: whoever read the pauses in the database
// meanwhile (a task claim does, in its own transaction) may have been held by it, and must
// hear of the resume.
func (w *Watcher) OnChange(f func(before, after courier.Pauses)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.changed = append(w.changed, f)
}

// Kick makes the watcher read the pauses now (a notification, a change in this process). It
// never blocks.
func (w *Watcher) Kick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Start reads the pauses once, then keeps reading them until ctx ends. A failed first read is
// returned: a worker that cannot tell what is paused must not start delivering.
func (w *Watcher) Start(ctx context.Context) error {
	if err := w.read(ctx, false); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(w.refresh)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-w.kick:
			}
			err := w.read(ctx, true)
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				// Once per outage: the pauses as last read stay in force meanwhile.
				w.log.Warn("could not read the pauses; keeping the ones last read", "error", err)
				failing = true
			case err == nil && failing:
				w.log.Info("reading the pauses again")
				failing = false
			}
		}
	}()
	return nil
}

// read reads the pauses and, if tell, tells the subscribers when a pause or resume was
// committed since the last read (the first read is the baseline, not a change).
func (w *Watcher) read(ctx context.Context, tell bool) error {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, changes, err := w.list.ReadPauses(rctx)
	if err != nil {
		return err
	}
	after := courier.NewPauses(list)
	before := w.cur.Swap(&after)
	counted := changes != w.changes
	w.changes = changes
	// The set is compared too: a row written by hand changes no count.
	if !tell || (!counted && same(*before, after)) {
		return nil
	}
	w.mu.Lock()
	fs := slices.Clone(w.changed)
	w.mu.Unlock()
	for _, f := range fs {
		f(*before, after)
	}
	return nil
}

func same(a, b courier.Pauses) bool {
	x, y := a.All(), b.All()
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i].Kind != y[i].Kind || x[i].Name != y[i].Name || !x[i].PausedAt.Equal(y[i].PausedAt) {
			return false
		}
	}
	return true
}
