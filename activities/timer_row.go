package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// TimerRunStore is what the timer workflows need to follow the timers' rows in courier's
// database: a timer of its own's claim, change and end, and a bucket's reserve.
type TimerRunStore interface {
	ClaimTimerRun(ctx context.Context, bizType, bizID, claim string) (courier.TimerRecord, bool, error)
	FinishTimerRun(ctx context.Context, bizType, bizID, claim string, state courier.TimerState, attempts int, lastError string) (bool, error)
	CancelTimerRecord(ctx context.Context, bizType, bizID string) (courier.TimerRecord, bool, error)
	RescheduleTimerRecord(ctx context.Context, bizType, bizID string, fireAt time.Time) (courier.TimerRecord, bool, error)
	ReserveDueTimers(ctx context.Context, bizType string, bucket int64, claim string, limit int) (int, []courier.TimerBucketRef, error)
	NextDueTimer(ctx context.Context, bizType string, bucket int64) (time.Time, bool, error)
}

// TimerRuns are the local activities through which timer workflows follow the timers' rows.
// They run on courier's workflow queue, so a paused business type holds only the deliveries
// (on the type's queue), not these: a timer that fell due reads firing while it waits.
type TimerRuns struct {
	store TimerRunStore
	// delivery reads a business type's delivery settings (Timers.LoadBizType).
	delivery func(ctx context.Context, name string) (contract.BizTypeDelivery, error)
	// arm starts a bucket's workflow (timers.Service.ArmBucket): the bucket of the next
	// trigger a schedule's claimed trigger wrote. Nil leaves them to the sweep.
	arm func(ctx context.Context, bizType string, bucket int64) error
}

// ArmsBucketsWith makes a reserve arm the buckets of the next triggers it wrote for wheel
// schedules (without it the sweep arms them once they are overdue).
func (a *TimerRuns) ArmsBucketsWith(arm func(ctx context.Context, bizType string, bucket int64) error) {
	a.arm = arm
}

// NewTimerRuns builds the row activities; delivery reads a type's delivery settings.
func NewTimerRuns(st TimerRunStore, delivery func(ctx context.Context, name string) (contract.BizTypeDelivery, error)) *TimerRuns {
	return &TimerRuns{store: st, delivery: delivery}
}

// ClaimRun takes a timer of its own's row for delivery once its fire time has come by the
// database's clock, and then reads its type's delivery settings (an unknown type fails the
// timer, its row claimed). A row not claimed is reported as it is.
func (a *TimerRuns) ClaimRun(ctx context.Context, p contract.ClaimTimerRunParams) (contract.TimerRunClaim, error) {
	rec, claimed, err := a.store.ClaimTimerRun(ctx, p.BizType, p.BizID, p.Claim)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return contract.TimerRunClaim{}, nil
	}
	if err != nil {
		return contract.TimerRunClaim{}, fmt.Errorf("claim timer %s/%s: %w", p.BizType, p.BizID, err)
	}
	out := contract.TimerRunClaim{Claimed: claimed, Found: true, State: rec.State, FireAt: rec.FireAt, Version: rec.Version}
	if claimed {
		if out.Delivery, err = a.delivery(ctx, p.BizType); err != nil {
			return contract.TimerRunClaim{}, err
		}
	}
	return out, nil
}

// ChangeRow cancels or reschedules a timer of its own in its row: the decision an update from
// a client that still sends changes to the run gets, the same as the API's.
func (a *TimerRuns) ChangeRow(ctx context.Context, p contract.ChangeTimerRowParams) (contract.TimerRowChange, error) {
	var rec courier.TimerRecord
	var changed bool
	var err error
	if p.Cancel {
		rec, changed, err = a.store.CancelTimerRecord(ctx, p.BizType, p.BizID)
	} else {
		rec, changed, err = a.store.RescheduleTimerRecord(ctx, p.BizType, p.BizID, p.FireAt)
	}
	if err != nil {
		return contract.TimerRowChange{}, fmt.Errorf("change timer %s/%s: %w", p.BizType, p.BizID, err)
	}
	return contract.TimerRowChange{Changed: changed, State: rec.State, FireAt: rec.FireAt, Version: rec.Version}, nil
}

// FinishRun records how a timer of its own's delivery ended in its row (a repeat changes
// nothing).
func (a *TimerRuns) FinishRun(ctx context.Context, p contract.FinishTimerRunParams) error {
	if _, err := a.store.FinishTimerRun(ctx, p.BizType, p.BizID, p.Claim, p.State, p.Attempts, p.LastError); err != nil {
		return fmt.Errorf("record timer %s/%s: %w", p.BizType, p.BizID, err)
	}
	return nil
}

// ReserveBatch claims a bucket's due timers for its next batch without counting an attempt,
// and says how many it holds, or, holding none, when the bucket's next timer is due. A bucket
// of an unknown business type reserves nothing (it fails as its delivery would, and its timers
// stay scheduled).
func (a *TimerRuns) ReserveBatch(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.ReserveTimerBatchResult, error) {
	var res contract.ReserveTimerBatchResult
	if _, err := a.delivery(ctx, p.BizType); err != nil {
		return res, err
	}
	n, next, err := a.store.ReserveDueTimers(ctx, p.BizType, p.Bucket, p.Claim, p.Limit)
	if err != nil {
		return res, fmt.Errorf("reserve due timers: %w", err)
	}
	if a.arm != nil {
		// The next triggers are stored: a bucket whose start fails here is armed by the sweep.
		for _, ref := range next {
			if err := a.arm(ctx, ref.BizType, ref.Bucket); err != nil && ctx.Err() == nil {
				activity.GetLogger(ctx).Warn("arming the bucket of a schedule's next trigger failed; the sweep will arm it",
					"biz_type", ref.BizType, "bucket", ref.Bucket, "error", err)
			}
		}
	}
	res.Reserved = n
	if n == 0 {
		next, ok, err := a.store.NextDueTimer(ctx, p.BizType, p.Bucket)
		if err != nil {
			return res, fmt.Errorf("next due timer: %w", err)
		}
		if ok {
			res.NextDue = next
		}
	}
	return res, nil
}
