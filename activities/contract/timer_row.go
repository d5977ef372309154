package contract

import (
	"time"

	"github.com/courier-oss/courier"
)

// Registered names of the activities through which timer workflows follow the timers' rows in
// courier's database. They run as local activities on courier's workflow queue, never on a
// business type's queue, so a paused type does not hold them.
const (
	// ClaimTimerRunName takes a timer of its own's row for delivery once its fire time has
	// come by the database's clock, and reads its type's delivery settings.
	ClaimTimerRunName = "timer-claim-run"
	// ChangeTimerRowName cancels or reschedules a timer of its own in its row, for a client that
	// still sends the change to the run as an update.
	ChangeTimerRowName = "timer-change-row"
	// FinishTimerRunName records how a timer of its own's delivery ended in its row.
	FinishTimerRunName = "timer-finish-run"
	// ReserveTimerBatchName claims a bucket's due timers for its next batch (bucketed mode)
	// without counting an attempt; the batch's delivery then takes exactly them. It answers a
	// ReserveTimerBatchResult (buckets recorded before the bucket waited on it: a count, which
	// they did not read).
	ReserveTimerBatchName = "timer-reserve-batch"
)

// ReserveTimerBatchResult is what a bucket's reserve holds: Reserved timers, claimed for the
// batch; with none, NextDue is the fire time of the bucket's earliest timer still scheduled
// (zero when none is left), which the bucket waits for before it reserves again, so no delivery
// is scheduled on the type's queue before a timer is due.
type ReserveTimerBatchResult struct {
	Reserved int
	NextDue  time.Time
}

// ClaimTimerRunParams name the timer and the run claiming it: Claim is the run's id, also the
// delivery's id.
type ClaimTimerRunParams struct {
	BizType string
	BizID   string
	Claim   string
}

// TimerRunClaim is what a claim found. Claimed: the run delivers the timer, with Delivery's
// settings. Otherwise the row as it is: still scheduled (due later by the database's clock,
// FireAt), cancelled, or another's; Found false when the timer has no row.
type TimerRunClaim struct {
	Claimed  bool
	Found    bool
	State    courier.TimerState
	FireAt   time.Time
	Version  int
	Delivery BizTypeDelivery
}

// ChangeTimerRowParams are a cancel (Cancel) or a reschedule to FireAt.
type ChangeTimerRowParams struct {
	BizType string
	BizID   string
	Cancel  bool
	FireAt  time.Time
}

// TimerRowChange is the row after a change: Changed says whether the change applied (false:
// the timer was no longer scheduled, State says what it is).
type TimerRowChange struct {
	Changed bool
	State   courier.TimerState
	FireAt  time.Time
	Version int
}

// FinishTimerRunParams end a timer of its own's row: delivered or failed, after Attempts, by
// the run that claimed it (Claim).
type FinishTimerRunParams struct {
	BizType   string
	BizID     string
	Claim     string
	State     courier.TimerState
	Attempts  int
	LastError string
}
