package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/courier-oss/courier"
)

// BandCounts are tasks per priority band (index 0 is priority 1).
type BandCounts [courier.PriorityBands]int

// ClaimTx is one claim transaction on one queue, as the rules see it: what a claim reads and
// the changes it makes, all in the transaction that holds the queue's limiter row, so no other
// claim, finish or cancel of the queue's slots runs meanwhile. The store implements it; every
// method runs SQL and decides nothing.
type ClaimTx interface {
	// Open reads the queue's settings and its slots in use (InFlight), locking its limiter row
	// until the transaction ends, whether an operator paused it and, when it has a free slot and
	// is not paused, its ready tasks per band (pending, due, within their pending timeout), each
	// count capped at max (the most one claim takes); in one round trip where the database
	// allows.
	Open(ctx context.Context, max int) (Opened, error)
	// TakeTokens takes up to want tokens from the queue's dispatch bucket (rate per second, at
	// most burst held); when it takes fewer, wait is how long until the next token.
	TakeTokens(ctx context.Context, rate float64, burst, want int) (took int, wait time.Duration, err error)
	// GiveBackTokens returns n tokens taken in this transaction and not spent.
	GiveBackTokens(ctx context.Context, burst, n int) error
	// KeysInFlight counts the queue's tasks in Processing by concurrency key.
	KeysInFlight(ctx context.Context) (map[string]int, error)
	// KeyCandidates reads the first n ready tasks of each key that has pending tasks in band,
	// grouped by key, each key's in claim order (higher version, then oldest).
	KeyCandidates(ctx context.Context, band, n int) ([]KeyCandidate, error)
	// ClaimBand moves up to n ready tasks of band to Processing on their next attempt, in claim
	// order, recording the batch run that will push them (batch; "" for attempts with runs of
	// their own), and returns them as they are afterwards.
	ClaimBand(ctx context.Context, band, n int, batch string) ([]courier.Task, error)
	// ClaimBands does what ClaimBand does for every band, up to take[band-1] tasks of each,
	// and counts the tasks it claimed in the queue's slots in use (AddInFlight), in one
	// statement where the database allows. It returns them by band, each band's in claim
	// order.
	ClaimBands(ctx context.Context, take BandCounts, batch string) ([]courier.Task, error)
	// ClaimPicked moves the picked tasks that are still ready to Processing on their next
	// attempt, as ClaimBand does, and returns them as they are afterwards.
	ClaimPicked(ctx context.Context, picked []KeyCandidate, batch string) ([]courier.Task, error)
	// AddInFlight counts n more slots in use on the queue's limiter row.
	AddInFlight(ctx context.Context, n int) error
}

// Opened is what a claim reads first (ClaimTx.Open).
type Opened struct {
	Queue  courier.Queue
	Paused bool
	Ready  BandCounts // zero when the queue has no free slot or is paused
}

// ClaimStore runs a claim: fn in one transaction on the queue, committed when fn returns nil.
type ClaimStore interface {
	RunClaim(ctx context.Context, queue string, fn func(context.Context, ClaimTx) error) error
}

// Attempt is a claimed task's attempt with the settings it runs under (the queue's, with the
// task's overrides applied): what a starter needs to run it.
type Attempt struct {
	TaskID            string
	Version           int64
	Attempt           int
	Priority          int
	Queue             string
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration
	PushTimeout       time.Duration // one try of the push (the queue's push_timeout)
	CreatedAt         time.Time
	Trace             courier.TraceContext // the inserting request's trace: the attempt joins it
	// Batch is the workflow id of the batch run that pushes the attempt (the batched mode);
	// "": the attempt runs in a run of its own.
	Batch string
}

// AttemptOf is a task's current attempt under its queue's settings and its own overrides.
func AttemptOf(t courier.Task, q courier.Queue) Attempt {
	eff := t.Overrides.Apply(q)
	return Attempt{TaskID: t.TaskID, Version: t.Version, Attempt: t.Attempt, Priority: t.Priority, Queue: t.Queue,
		ProcessingTimeout: eff.ProcessingTimeout, HeartbeatTimeout: eff.HeartbeatTimeout, PushTimeout: eff.PushTimeout,
		CreatedAt: t.CreatedAt, Trace: t.Trace, Batch: t.Batch}
}

// Claim is what one claim took.
type Claim struct {
	Attempts []Attempt
	// Batch is the workflow id of the batch run that is to push the attempts, for a queue in
	// the batched mode (courier.TaskBatchWorkflowID); "" when each attempt gets a run of its
	// own.
	Batch string
	// NextToken is set when the queue's dispatch rate held back ready tasks: its next token
	// comes after this long.
	NextToken time.Duration
	// Drained is set when the claim took every ready task it saw, with free slots to spare:
	// the queue's tasks come slower than its slots free up.
	Drained bool
}

// Dispatcher applies the rules to claims. It keeps each queue's place in the weighted round of
// its bands between claims, so shares are exact over any run of claims of one process; it is
// safe for concurrent use.
type Dispatcher struct {
	mu       sync.Mutex
	choosers map[string]*Chooser // by queue
	weights  map[string]courier.BandWeights
	batchID  func() string // names a claim of a queue in the batched mode
}

// New returns a dispatcher.
func New() *Dispatcher {
	return &Dispatcher{choosers: map[string]*Chooser{}, weights: map[string]courier.BandWeights{}, batchID: newBatchID}
}

// newBatchID names a claim: the time in milliseconds (base 36, so a queue's batches list in
// the order they were claimed) and random bits, unique across workers.
func newBatchID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// Claim moves up to max of a queue's ready tasks to Processing in one transaction of s and
// returns their attempts. The rules, in the order they apply:
//   - a queue without a push URL, or paused by an operator, claims nothing (both read in the
//     transaction, so no claim that begins after the change commits takes a task, on any
//     worker);
//   - free slots are the concurrency limit minus the slots in use, and the slots in use grow by
//     the number taken in the same transaction: the limit is exact across workers;
//   - a dispatch rate takes one token per task from the queue's bucket in the database;
//   - the free slots are split across the bands that have ready tasks by their weights
//     (Chooser), each band's share taken by higher version, then oldest;
//   - in a keyed queue (courier.Queue.Keyed) each band's share goes key by key (pickTurns); a
//     share its keys cannot use (each at its per-key limit) goes to the other bands;
//   - a queue in the batched mode names the claim's batch run on every attempt it takes.
func (d *Dispatcher) Claim(ctx context.Context, s ClaimStore, queue string, max int) (Claim, error) {
	var out Claim
	err := s.RunClaim(ctx, queue, func(ctx context.Context, tx ClaimTx) error {
		var err error
		out, err = d.claim(ctx, tx, max)
		return err
	})
	return out, err
}

func (d *Dispatcher) claim(ctx context.Context, tx ClaimTx, max int) (Claim, error) {
	var out Claim
	if max <= 0 {
		max = courier.MaxConcurrencyLimit
	}
	open, err := tx.Open(ctx, max)
	q := open.Queue
	if err != nil || q.PushURL == "" {
		return out, err // no push URL: its tasks wait
	}
	slots := min(q.ConcurrencyLimit-q.InFlight, max)
	if slots <= 0 || open.Paused {
		return out, nil
	}
	ready := open.Ready
	total := 0
	for _, n := range ready {
		total += n
	}
	if total == 0 {
		return out, nil
	}
	if q.DispatchRate > 0 {
		took, wait, err := tx.TakeTokens(ctx, q.DispatchRate, q.DispatchBucket(), min(slots, total))
		if err != nil {
			return out, err
		}
		if took < min(slots, total) {
			out.NextToken = wait
		}
		if slots = took; slots == 0 {
			return out, nil
		}
	}
	if q.Batched() {
		out.Batch = courier.TaskBatchWorkflowID(q.Name, d.batchID())
	}
	ch := d.chooser(q)
	if q.Keyed() {
		err = d.claimKeys(ctx, tx, q, ch, ready, slots, &out)
	} else {
		// Every band's share in one statement, counted in the slots in use by it.
		var claimed []courier.Task
		if claimed, err = tx.ClaimBands(ctx, d.split(ch, ready, slots), out.Batch); err == nil {
			for _, t := range claimed {
				out.Attempts = append(out.Attempts, AttemptOf(t, q))
			}
		}
	}
	if err != nil {
		return out, err
	}
	if q.DispatchRate > 0 {
		if err := tx.GiveBackTokens(ctx, q.DispatchBucket(), slots-len(out.Attempts)); err != nil {
			return out, err
		}
	}
	if len(out.Attempts) == 0 {
		out.Batch = ""
	}
	out.Drained = total < slots && len(out.Attempts) == total
	return out, nil
}

// claimKeys claims up to slots of a keyed queue's ready tasks into out, band by band as the
// chooser splits them and key by key within a band, and counts them in the slots in use. A
// band whose share its keys could not fill is left out of the next round, and what is left of
// the slots is split again among the others.
func (d *Dispatcher) claimKeys(ctx context.Context, tx ClaimTx, q courier.Queue, ch *Chooser, ready BandCounts, slots int, out *Claim) error {
	inFlightByKey, err := tx.KeysInFlight(ctx)
	if err != nil {
		return err
	}
	for round := 0; slots > len(out.Attempts) && round < courier.PriorityBands; round++ {
		take := d.split(ch, ready, slots-len(out.Attempts))
		progress := false
		for b := 1; b <= courier.PriorityBands; b++ {
			if take[b-1] <= 0 {
				continue
			}
			claimed, err := claimKeyed(ctx, tx, q, b, take[b-1], inFlightByKey, out.Batch)
			if err != nil {
				return err
			}
			if len(claimed) < take[b-1] {
				ready[b-1] = 0
			} else {
				ready[b-1] -= len(claimed)
			}
			progress = progress || len(claimed) > 0
			for _, t := range claimed {
				out.Attempts = append(out.Attempts, AttemptOf(t, q))
			}
		}
		if !progress {
			break
		}
	}
	if len(out.Attempts) == 0 {
		return nil
	}
	return tx.AddInFlight(ctx, len(out.Attempts))
}

// chooser is the queue's band chooser, made anew when its weights change.
func (d *Dispatcher) chooser(q courier.Queue) *Chooser {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := d.choosers[q.Name]
	if ch == nil || d.weights[q.Name] != q.Weights {
		ch = NewChooser(q.Weights)
		d.choosers[q.Name], d.weights[q.Name] = ch, q.Weights
	}
	return ch
}

// split hands slots to the bands with ready tasks, one at a time by the chooser, never more to
// a band than it has ready.
func (d *Dispatcher) split(ch *Chooser, ready BandCounts, slots int) BandCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	var take BandCounts
	for i := 0; i < slots; i++ {
		b, ok := ch.Pick(func(b int) bool { return take[b-1] < ready[b-1] })
		if !ok {
			break
		}
		take[b-1]++
	}
	return take
}

// claimKeyed claims up to n ready tasks of one band of a keyed queue, key by key (pickTurns),
// and counts them in inFlight.
func claimKeyed(ctx context.Context, tx ClaimTx, q courier.Queue, band, n int, inFlight map[string]int, batch string) ([]courier.Task, error) {
	cands, err := tx.KeyCandidates(ctx, band, n)
	if err != nil {
		return nil, err
	}
	picked := pickTurns(q, cands, n, inFlight)
	if len(picked) == 0 {
		return nil, nil
	}
	claimed, err := tx.ClaimPicked(ctx, picked, batch)
	if err != nil {
		return nil, err
	}
	for _, t := range claimed {
		inFlight[t.ConcurrencyKey]++
	}
	return claimed, nil
}
