package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ProbeTimeout bounds one evaluation of every check: a dependency that hangs is reported down
// after this long, without spending the other checks' time.
const ProbeTimeout = 3 * time.Second

// StaleIntervals is how many of its intervals a loop may go without a completed pass before
// it is reported stale (unready, and the CourierLoopStalled alert).
const StaleIntervals = 5

// WedgedAfter is how long a loop may go without ending a single turn, completed or failed,
// before /healthz reports the process wedged. A turn that fails (a database that is down) still
// ends: such a process is unready, not wedged, and restarting it would not help.
const WedgedAfter = 5 * time.Minute

// Check is one readiness dependency: a name and a probe.
type Check struct {
	Name  string
	Probe func(ctx context.Context) error
	// Optional checks are reported ("down") without making the process unready: one message
	// broker that is down delays only its own records.
	Optional bool
}

// Report is one evaluation of a set of checks.
type Report struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"` // "ok" or "down" by check name
	// Errors are the failed checks' errors, for the log only: they may name hosts and users,
	// and anyone may call /readyz.
	Errors map[string]error `json:"-"`
}

// Evaluate probes every check at once, each within ProbeTimeout (or ctx's own deadline).
func Evaluate(ctx context.Context, checks []Check) Report {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { errs[i] = c.Probe(ctx) })
	}
	wg.Wait()
	r := Report{Ready: true, Checks: make(map[string]string, len(checks)), Errors: map[string]error{}}
	for i, c := range checks {
		if errs[i] != nil {
			r.Checks[c.Name] = "down"
			r.Errors[c.Name] = errs[i]
			r.Ready = r.Ready && c.Optional
			continue
		}
		r.Checks[c.Name] = "ok"
	}
	return r
}

// Loop records the passes of one periodic loop. Its zero value is not usable: NewLoop.
type Loop struct {
	name     string
	interval time.Duration
	now      func() time.Time
	pass     atomic.Int64 // unix nanoseconds of the last completed pass (or of NewLoop)
	turn     atomic.Int64 // unix nanoseconds of the last turn that ended, completed or not
}

// NewLoop tracks a loop named name that passes at least every interval when healthy. It counts
// as having passed at its creation, so a loop just started is not stale. now is the clock; nil
// is time.Now.
func NewLoop(name string, interval time.Duration, now func() time.Time) *Loop {
	if now == nil {
		now = time.Now
	}
	l := &Loop{name: name, interval: interval, now: now}
	t := now().UnixNano()
	l.pass.Store(t)
	l.turn.Store(t)
	return l
}

// Name is the loop's name, as metrics and reports show it.
func (l *Loop) Name() string { return l.name }

// Interval is how often the loop passes when healthy.
func (l *Loop) Interval() time.Duration { return l.interval }

// Turned records that one turn of the loop ended; completed says it did its work (a claim
// that failed on its database did not).
func (l *Loop) Turned(completed bool) {
	t := l.now().UnixNano()
	l.turn.Store(t)
	if completed {
		l.pass.Store(t)
	}
}

// SincePass is how long ago the loop last completed a pass.
func (l *Loop) SincePass() time.Duration { return l.now().Sub(time.Unix(0, l.pass.Load())) }

// SinceTurn is how long ago a turn of the loop last ended.
func (l *Loop) SinceTurn() time.Duration { return l.now().Sub(time.Unix(0, l.turn.Load())) }

// Stale says why the loop has not completed a pass for StaleIntervals of its interval; nil
// while it has.
func (l *Loop) Stale() error {
	if d := l.SincePass(); d > StaleIntervals*l.interval {
		return fmt.Errorf("%s: no completed pass for %s (interval %s)", l.name, d.Round(time.Millisecond), l.interval)
	}
	return nil
}

// Wedged says why the loop has not ended a turn for WedgedAfter; nil while it turns.
func (l *Loop) Wedged() error {
	if d := l.SinceTurn(); d > WedgedAfter {
		return fmt.Errorf("%s: no turn ended for %s", l.name, d.Round(time.Second))
	}
	return nil
}

// Check is the loop's readiness check, "loop:<name>": down while it is stale.
func (l *Loop) Check() Check {
	return Check{Name: "loop:" + l.name, Probe: func(context.Context) error { return l.Stale() }}
}

// Live says why a process whose loops are loops is wedged; nil while every one turns.
func Live(loops []*Loop) error {
	var errs []error
	for _, l := range loops {
		if err := l.Wedged(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
