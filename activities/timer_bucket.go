package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/store"
	"github.com/courier-oss/courier/webhook"
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
	store         TimerRowStore
	pub           mq.Publisher
	handOver      TimerHandOver
	metrics       *metrics.Timers
	allowLoopback bool
	clients       callback.Pool
}

// NewTimerBuckets builds the bucket deliveries; m may be nil. allowLoopback is for dev mode.
func NewTimerBuckets(st TimerRowStore, pub mq.Publisher, handOver TimerHandOver, allowLoopback bool, m *metrics.Timers) *TimerBuckets {
	return &TimerBuckets{store: st, pub: pub, handOver: handOver, allowLoopback: allowLoopback, metrics: m}
}

// bucketCallbacksAtOnce bounds the HTTP callbacks one batch has in flight.
const bucketCallbacksAtOnce = 64

// deliveryOutcome is how one timer's delivery in a batch ended.
type deliveryOutcome struct {
	err       error
	permanent bool // no retry can change it
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
		outs := a.deliver(ctx, b, recs)
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

// count records one delivery's outcome and, for a first attempt, how late it went out.
func (a *TimerBuckets) count(bizType string, o deliveryOutcome) {
	if a.metrics == nil {
		return
	}
	outcome := "delivered"
	switch {
	case o.err == nil:
	case o.permanent:
		outcome = "failed"
	default:
		outcome = "retry"
	}
	a.metrics.Deliveries.WithLabelValues(bizType, outcome).Inc()
}

// deliver sends each record as its type says and returns one outcome per record, in order.
func (a *TimerBuckets) deliver(ctx context.Context, b courier.BizType, recs []courier.TimerRecord) []deliveryOutcome {
	outs := make([]deliveryOutcome, len(recs))
	bodies := make([][]byte, len(recs))
	for i, r := range recs {
		if a.metrics != nil && r.Attempts == 1 {
			a.metrics.ObserveLateness(b.Name, time.Since(r.FireAt).Seconds())
		}
		payload := json.RawMessage(r.Payload)
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		body, err := json.Marshal(api.TimerCallback{DeliveryID: r.DeliveryID, BizType: r.BizType, BizID: r.BizID,
			FireAt: r.FireAt.UTC(), Attempt: int32(r.Attempts), Payload: payload})
		if err != nil {
			outs[i] = deliveryOutcome{err: err, permanent: true}
		}
		bodies[i] = body
	}
	switch b.Delivery {
	case courier.DeliveryMQ:
		a.publish(ctx, b, recs, bodies, outs)
	case courier.DeliveryHTTP:
		a.callBack(ctx, b, recs, bodies, outs)
	default:
		for i := range outs {
			outs[i] = deliveryOutcome{err: fmt.Errorf("unknown delivery %q", b.Delivery), permanent: true}
		}
	}
	return outs
}

// publish sends the batch's messages through the router at once.
func (a *TimerBuckets) publish(ctx context.Context, b courier.BizType, recs []courier.TimerRecord, bodies [][]byte, outs []deliveryOutcome) {
	var msgs []mq.Message
	var idx []int
	for i, r := range recs {
		if outs[i].err != nil {
			continue
		}
		msgs = append(msgs, mq.Message{ID: courier.TimerWorkflowID(r.BizType, r.BizID) + "/" + r.DeliveryID,
			Topic: b.Topic, Key: r.BizID, Payload: bodies[i]})
		idx = append(idx, i)
	}
	activity.RecordHeartbeat(ctx, len(msgs))
	for j, err := range mq.PublishAll(ctx, a.pub, msgs) {
		if err != nil {
			outs[idx[j]] = deliveryOutcome{err: err, permanent: errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused)}
		}
	}
}

// callBack sends the batch's callbacks, up to bucketCallbacksAtOnce at once and within the
// type's rate limit (tokens taken from the database before each group), heartbeating as it
// goes.
func (a *TimerBuckets) callBack(ctx context.Context, b courier.BizType, recs []courier.TimerRecord, bodies [][]byte, outs []deliveryOutcome) {
	signer, err := webhook.NewSigner(b.Secrets...)
	if err != nil {
		for i := range outs {
			outs[i] = deliveryOutcome{err: err, permanent: true}
		}
		return
	}
	client := a.clients.Client(callback.Options{AllowPrivate: b.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: b.RequestTimeout})
	sem := make(chan struct{}, bucketCallbacksAtOnce)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < len(recs); {
		n := len(recs) - i
		if b.RateLimit > 0 {
			got, wait, err := a.store.TakeTokens(ctx, "biz-type:"+b.Name, b.RateLimit, rateBurst(b.RateLimit), min(n, bucketCallbacksAtOnce))
			if err != nil {
				for j := i; j < len(recs); j++ {
					outs[j] = deliveryOutcome{err: fmt.Errorf("rate limit: %w", err)}
				}
				return
			}
			if got == 0 {
				activity.RecordHeartbeat(ctx, i)
				select {
				case <-ctx.Done():
					for j := i; j < len(recs); j++ {
						outs[j] = deliveryOutcome{err: ctx.Err()}
					}
					return
				case <-time.After(wait):
				}
				continue
			}
			n = got
		}
		for j := i; j < i+n; j++ {
			if outs[j].err != nil {
				continue
			}
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				err := client.Send(ctx, callback.Request{URL: b.CallbackURL, DeliveryID: recs[j].DeliveryID, Body: bodies[j], Signer: signer})
				var ce *callback.Error
				outs[j] = deliveryOutcome{err: err, permanent: errors.As(err, &ce) && !ce.Retryable}
			})
		}
		i += n
		activity.RecordHeartbeat(ctx, i)
	}
}

// rateBurst is the burst of a business type's delivery rate: a second's worth, at least 1.
func rateBurst(rate float64) int { return max(1, int(rate)) }

// RecordResult writes how a bucketed timer's own run ended into its row (a repeat changes
// nothing).
func (a *TimerBuckets) RecordResult(ctx context.Context, p contract.RecordTimerResultParams) error {
	if _, err := a.store.RecordTimerResult(ctx, p.BizType, p.BizID, p.State, p.Attempts, p.LastError); err != nil {
		return fmt.Errorf("record timer %s/%s: %w", p.BizType, p.BizID, err)
	}
	return nil
}
