package activities

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/store"
)

// TimerRowStore is what the bucket deliveries need from courier's database.
type TimerRowStore interface {
	BizTypeStore
	ClaimDueTimers(ctx context.Context, bizType string, bucket int64, claim string, limit int) ([]courier.TimerRecord, error)
	FinishTimerClaim(ctx context.Context, bizType, claim string, outcomes []store.TimerOutcome) error
	NextDueTimer(ctx context.Context, bizType string, bucket int64) (time.Time, bool, error)
	RecordTimerResult(ctx context.Context, bizType, bizID string, state courier.TimerState, attempts int, lastError string) (bool, error)
	TakeTokens(ctx context.Context, name string, rate float64, burst, want int) (int, time.Duration, error)
}

// TimerHandOver gives a bucketed timer whose delivery failed to a timer run of its own, which
// retries it with the rest of the type's budget (or, permanent, fails it for good) and records
// the end in its row (timers.Service).
type TimerHandOver interface {
	HandOver(ctx context.Context, rec courier.TimerRecord, lastError string, permanent bool) error
}

// TimerBuckets delivers the batches of bucketed timers.
type TimerBuckets struct {
	timerDelivery
	store    TimerRowStore
	handOver TimerHandOver
}

// NewTimerBuckets builds the bucket deliveries; m may be nil. allowLoopback is for dev mode.
func NewTimerBuckets(st TimerRowStore, pub mq.Publisher, handOver TimerHandOver, allowLoopback bool, m *metrics.Timers) *TimerBuckets {
	return &TimerBuckets{store: st, handOver: handOver, timerDelivery: timerDelivery{pub: pub, allowLoopback: allowLoopback, metrics: m}}
}

// DeliverBatch claims up to p.Limit due timers of the bucket (or the ones p.Claim took before,
// when this is a retry) and delivers them: MQ messages in one batch through the broker router,
// HTTP callbacks up to 64 at once, each within the type's request timeout and its rate limit,
// which every worker shares through the database. Delivered timers are marked delivered;
// failed ones are handed to timer runs of their own, which retry them with the rest of the
// type's budget. It reports the fire time of the next timer still scheduled in the bucket.
func (a *TimerBuckets) DeliverBatch(ctx context.Context, p contract.DeliverTimerBatchParams) (contract.DeliverTimerBatchResult, error) {
	var res contract.DeliverTimerBatchResult
	b, err := a.store.GetBizType(ctx, p.BizType)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return res, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeUnknownBizType, err)
	}
	if err != nil {
		return res, err
	}
	recs, err := a.store.ClaimDueTimers(ctx, p.BizType, p.Bucket, p.Claim, p.Limit)
	if err != nil {
		return res, fmt.Errorf("claim due timers: %w", err)
	}
	res.Claimed = len(recs)
	if len(recs) > 0 {
		ts := make([]firedTimer, len(recs))
		for i, r := range recs {
			ts[i] = firedTimer{BizType: r.BizType, BizID: r.BizID, DeliveryID: r.DeliveryID, FireAt: r.FireAt,
				Attempt: int32(r.Attempts), Payload: r.Payload}
			a.observeLateness(ts[i])
		}
		outs := a.deliver(ctx, b, ts, deliveryPace{takeTokens: a.store.TakeTokens, heartbeat: activity.RecordHeartbeat})
		results := make([]store.TimerOutcome, len(recs))
		for i, r := range recs {
			results[i] = store.TimerOutcome{BizID: r.BizID, Delivered: outs[i].err == nil}
			a.count(p.BizType, outs[i])
			if outs[i].err == nil {
				res.Delivered++
				continue
			}
			results[i].LastError, results[i].Failed = outs[i].err.Error(), outs[i].permanent
			// Handed over before the claim lets go of it: a crash in between delivers the
			// batch again under the same claim, and a second hand-over finds the run started.
			if err := a.handOver.HandOver(ctx, r, results[i].LastError, outs[i].permanent); err != nil {
				return res, fmt.Errorf("hand timer %s/%s to a run of its own: %w", r.BizType, r.BizID, err)
			}
			res.HandedOver++
		}
		if err := a.store.FinishTimerClaim(ctx, p.BizType, p.Claim, results); err != nil {
			return res, fmt.Errorf("finish the batch: %w", err)
		}
	}
	next, ok, err := a.store.NextDueTimer(ctx, p.BizType, p.Bucket)
	if err != nil {
		return res, err
	}
	if ok {
		res.NextDue = next
	}
	return res, nil
}

// RecordResult writes how a bucketed timer's own run ended into its row (a repeat changes
// nothing).
func (a *TimerBuckets) RecordResult(ctx context.Context, p contract.RecordTimerResultParams) error {
	if _, err := a.store.RecordTimerResult(ctx, p.BizType, p.BizID, p.State, p.Attempts, p.LastError); err != nil {
		return fmt.Errorf("record timer %s/%s: %w", p.BizType, p.BizID, err)
	}
	return nil
}
