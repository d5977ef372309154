package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/webhook"
)

// timerDelivery sends fired timers to their business type's target: a signed HTTP callback or
// an MQ publish. Both timer modes deliver through it: a timer of its own one attempt at a time
// (Timers.Deliver), a bucket in batches within the type's shared rate limit
// (TimerBuckets.DeliverBatch); a timer that failed for good notifies through it too.
type timerDelivery struct {
	pub           mq.Publisher
	allowLoopback bool // courier dev lets callbacks reach 127.0.0.1
	clients       callback.Pool
	metrics       *metrics.Timers // nil: not counted
}

// firedTimer is one timer to deliver, on its attempt-th attempt.
type firedTimer struct {
	BizType, BizID string
	DeliveryID     string // the same for every attempt: receivers deduplicate on it
	FireAt         time.Time
	Attempt        int32
	Payload        []byte
}

// deliveryOutcome is how one delivery attempt ended.
type deliveryOutcome struct {
	err        error
	permanent  bool          // no retry can change it
	retryAfter time.Duration // the receiver asked to be tried again after this long
}

// deliveryPace is what a batch of deliveries keeps to as it goes: the type's rate limit, whose
// tokens every worker takes from the database, and a heartbeat. The zero pace (one timer an
// attempt, limited by its queue's activity rate) has neither.
type deliveryPace struct {
	takeTokens func(ctx context.Context, name string, rate float64, burst, want int) (int, time.Duration, error)
	heartbeat  func(ctx context.Context, details ...any)
}

func (p deliveryPace) beat(ctx context.Context, details any) {
	if p.heartbeat != nil {
		p.heartbeat(ctx, details)
	}
}

// callbacksAtOnce bounds the HTTP callbacks one batch has in flight.
const callbacksAtOnce = 64

// rateBurst is the burst of a business type's delivery rate: a second's worth, at least 1.
func rateBurst(rate float64) int { return max(1, int(rate)) }

// observeLateness records how late a timer's first attempt went out.
func (d *timerDelivery) observeLateness(t firedTimer) {
	if d.metrics != nil && t.Attempt == 1 && !t.FireAt.IsZero() {
		d.metrics.ObserveLateness(t.BizType, time.Since(t.FireAt).Seconds())
	}
}

// count records one attempt's outcome.
func (d *timerDelivery) count(bizType string, o deliveryOutcome) {
	if d.metrics == nil {
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
	d.metrics.Deliveries.WithLabelValues(bizType, outcome).Inc()
}

// deliver sends each timer as its type says and returns one outcome per timer, in order: MQ
// messages together through the broker router (one alone as a single publish), HTTP callbacks
// up to callbacksAtOnce at once, each within the type's request timeout and the pace's rate.
func (d *timerDelivery) deliver(ctx context.Context, b courier.BizType, ts []firedTimer, pace deliveryPace) []deliveryOutcome {
	outs := make([]deliveryOutcome, len(ts))
	bodies := make([][]byte, len(ts))
	for i, t := range ts {
		payload := json.RawMessage(t.Payload)
		if len(payload) == 0 {
			payload = json.RawMessage("null")
		}
		body, err := json.Marshal(api.TimerCallback{DeliveryID: t.DeliveryID, BizType: t.BizType, BizID: t.BizID,
			FireAt: t.FireAt.UTC(), Attempt: t.Attempt, Payload: payload})
		if err != nil {
			outs[i] = deliveryOutcome{err: err, permanent: true}
		}
		bodies[i] = body
	}
	switch b.Delivery {
	case courier.DeliveryMQ:
		d.publish(ctx, b, ts, bodies, outs, pace)
	case courier.DeliveryHTTP:
		d.callBack(ctx, b, ts, bodies, outs, pace)
	default:
		for i := range outs {
			outs[i] = deliveryOutcome{err: fmt.Errorf("unknown delivery %q", b.Delivery), permanent: true}
		}
	}
	return outs
}

// publish sends the timers' messages, each with the id timer/<biz_type>/<biz_id>/<delivery id>
// so that the broker drops a repeat.
func (d *timerDelivery) publish(ctx context.Context, b courier.BizType, ts []firedTimer, bodies [][]byte, outs []deliveryOutcome, pace deliveryPace) {
	var msgs []mq.Message
	var idx []int
	for i, t := range ts {
		if outs[i].err != nil {
			continue
		}
		msgs = append(msgs, mq.Message{ID: courier.TimerWorkflowID(t.BizType, t.BizID) + "/" + t.DeliveryID,
			Topic: b.Topic, Key: t.BizID, Payload: bodies[i]})
		idx = append(idx, i)
	}
	pace.beat(ctx, len(msgs))
	if len(msgs) == 1 {
		outs[idx[0]] = d.publishOne(ctx, msgs[0])
		return
	}
	for j, err := range mq.PublishAll(ctx, d.pub, msgs) {
		outs[idx[j]] = publishOutcome(err)
	}
}

// publishOne publishes one message.
func (d *timerDelivery) publishOne(ctx context.Context, m mq.Message) deliveryOutcome {
	return publishOutcome(d.pub.Publish(ctx, m))
}

// publishOutcome classifies a publish: a topic no broker takes, or a message a broker refuses,
// fails for good; the others (a broker down or slow) are tried again.
func publishOutcome(err error) deliveryOutcome {
	return deliveryOutcome{err: err, permanent: errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused)}
}

// callbackOutcome classifies a signed callback: what the receiver's answer says (429, 5xx and
// timeouts are tried again, after its Retry-After when it sent one), or, for an error of
// another kind, tried again.
func callbackOutcome(err error) deliveryOutcome {
	var ce *callback.Error
	if errors.As(err, &ce) {
		return deliveryOutcome{err: err, permanent: !ce.Retryable, retryAfter: ce.RetryAfter}
	}
	return deliveryOutcome{err: err}
}

// callbackSender is the signer and pooled client a type's callbacks go out with.
type callbackSender struct {
	client *callback.Client
	signer *webhook.Signer
}

// sender builds the type's callback sender; an unusable secret fails for good.
func (d *timerDelivery) sender(b courier.BizType) (callbackSender, error) {
	signer, err := webhook.NewSigner(b.Secrets...)
	if err != nil {
		return callbackSender{}, err
	}
	client := d.clients.Client(callback.Options{AllowPrivate: b.AllowPrivate, AllowLoopback: d.allowLoopback, Timeout: b.RequestTimeout})
	return callbackSender{client: client, signer: signer}, nil
}

// send posts one signed body to url.
func (s callbackSender) send(ctx context.Context, url, deliveryID string, body []byte) deliveryOutcome {
	return callbackOutcome(s.client.Send(ctx, callback.Request{URL: url, DeliveryID: deliveryID, Body: body, Signer: s.signer}))
}

// callBack sends the timers' callbacks, up to callbacksAtOnce at once and, with a pace that
// takes tokens, within the type's rate limit (tokens taken before each group), heartbeating as
// it goes.
func (d *timerDelivery) callBack(ctx context.Context, b courier.BizType, ts []firedTimer, bodies [][]byte, outs []deliveryOutcome, pace deliveryPace) {
	s, err := d.sender(b)
	if err != nil {
		for i := range outs {
			outs[i] = deliveryOutcome{err: err, permanent: true}
		}
		return
	}
	sem := make(chan struct{}, callbacksAtOnce)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < len(ts); {
		n := len(ts) - i
		if b.RateLimit > 0 && pace.takeTokens != nil {
			got, wait, err := pace.takeTokens(ctx, "biz-type:"+b.Name, b.RateLimit, rateBurst(b.RateLimit), min(n, callbacksAtOnce))
			if err != nil {
				for j := i; j < len(ts); j++ {
					outs[j] = deliveryOutcome{err: fmt.Errorf("rate limit: %w", err)}
				}
				return
			}
			if got == 0 {
				pace.beat(ctx, i)
				select {
				case <-ctx.Done():
					for j := i; j < len(ts); j++ {
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
				outs[j] = s.send(ctx, b.CallbackURL, ts[j].DeliveryID, bodies[j])
			})
		}
		i += n
		pace.beat(ctx, i)
	}
}

// deliveryFailed is how a failed delivery attempt ends: a permanent failure is not retried; the
// others (the receiver down, busy or answering 5xx or 429) are retried after retryAfter when the
// receiver asked for it. Both are benign, so the SDK does not log every attempt as an error: a
// timer that fails for good is logged once, by its run. Both carry the attempt's number in
// their details, so a timer that fails for good says how many attempts it made.
func deliveryFailed(o deliveryOutcome, attempt int32) error {
	typ := contract.ErrTypeRetryableDelivery
	if o.permanent {
		typ = contract.ErrTypePermanentDelivery
	}
	return temporal.NewApplicationErrorWithOptions(o.err.Error(), typ, temporal.ApplicationErrorOptions{
		NonRetryable: o.permanent, Cause: o.err, NextRetryDelay: o.retryAfter, Category: temporal.ApplicationErrorCategoryBenign,
		Details: []any{contract.DeliveryAttempt{Attempt: int(attempt)}}})
}

// attemptOutcome reads an activity's error as an outcome, for counting.
func attemptOutcome(err error) deliveryOutcome {
	var ae *temporal.ApplicationError
	return deliveryOutcome{err: err, permanent: errors.As(err, &ae) && ae.NonRetryable()}
}
