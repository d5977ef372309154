package activities

import (
	"context"
	"encoding/json"
	"errors"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
)

// BizTypeStore is what the timer activities need from the database.
type BizTypeStore interface {
	GetBizType(ctx context.Context, name string) (courier.BizType, error)
}

// Timers delivers fired timers: a signed HTTP callback or an MQ publish, per business type.
type Timers struct {
	timerDelivery
	types BizTypeStore
}

// NewTimers builds the timer activities. allowLoopback is for dev mode only; m may be nil.
func NewTimers(types BizTypeStore, pub mq.Publisher, allowLoopback bool, m *metrics.Timers) *Timers {
	return &Timers{types: types, timerDelivery: timerDelivery{pub: pub, allowLoopback: allowLoopback, metrics: m}}
}

func (a *Timers) bizType(ctx context.Context, name string) (courier.BizType, error) {
	b, err := a.types.GetBizType(ctx, name)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return b, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeUnknownBizType, err)
	}
	return b, err
}

// LoadBizType returns the delivery settings the timer workflow schedules its delivery with.
func (a *Timers) LoadBizType(ctx context.Context, name string) (contract.BizTypeDelivery, error) {
	b, err := a.bizType(ctx, name)
	if err != nil {
		return contract.BizTypeDelivery{}, err
	}
	return contract.BizTypeDelivery{
		TaskQueue:       courier.BizTypeTaskQueue(b.Name),
		InitialInterval: b.RetryInitial, Backoff: b.RetryBackoff, MaxInterval: b.RetryMax,
		MaxAttempts: int32(b.MaxAttempts), RequestTimeout: b.RequestTimeout,
		NotifyFailure: b.FailureURL != "" || b.FailureTopic != "",
	}, nil
}

// Deliver sends one fired timer and returns the attempt number that succeeded. 429, 5xx and
// timeouts are retried by the workflow's policy (a Retry-After sets the next delay); other
// statuses and refused targets fail at once.
func (a *Timers) Deliver(ctx context.Context, p contract.DeliverTimerParams) (n int, err error) {
	t := firedTimer{BizType: p.BizType, BizID: p.BizID, DeliveryID: p.DeliveryID, FireAt: p.FireAt,
		Attempt: activity.GetInfo(ctx).Attempt, Payload: p.Payload}
	a.observeLateness(t)
	defer func() { a.count(p.BizType, attemptOutcome(err)) }()
	b, err := a.bizType(ctx, p.BizType)
	if err != nil {
		return 0, err
	}
	if o := a.deliver(ctx, b, []firedTimer{t}, deliveryPace{})[0]; o.err != nil {
		return 0, deliveryFailed(o, t.Attempt)
	}
	return int(t.Attempt), nil
}

// NotifyFailure sends the timer.failed event of a timer that failed for good to its type's
// failure targets: signed like a callback to failure_url, published to failure_topic (message
// id timer/<biz_type>/<biz_id>/<delivery id>/failed, so a repeat is dropped). Receivers answering
// 5xx or 429, or a broker that is down, are retried by the activity's budget; an event that
// could not be sent within it is logged.
func (a *Timers) NotifyFailure(ctx context.Context, p contract.NotifyTimerFailureParams) (err error) {
	b, err := a.bizType(ctx, p.BizType)
	if err != nil {
		return err
	}
	body, err := json.Marshal(api.TimerFailedEvent{Event: api.TimerFailedEventName, BizType: p.BizType, BizID: p.BizID,
		FireAt: p.FireAt.UTC(), Attempts: p.Attempts, LastError: p.LastError, DeliveryID: p.DeliveryID})
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePermanentDelivery, err)
	}
	info := activity.GetInfo(ctx)
	defer func() {
		if err != nil && (info.Attempt >= info.RetryPolicy.MaximumAttempts || !retryableDelivery(err)) {
			activity.GetLogger(ctx).Error("a failed timer's event could not be sent", "biz_type", p.BizType, "biz_id", p.BizID, "error", err)
		}
	}()
	if b.FailureTopic != "" {
		o := a.publishOne(ctx, mq.Message{ID: courier.TimerWorkflowID(p.BizType, p.BizID) + "/" + p.DeliveryID + "/failed",
			Topic: b.FailureTopic, Key: p.BizID, Payload: body})
		if o.err != nil {
			return deliveryFailed(o, info.Attempt)
		}
	}
	if b.FailureURL != "" {
		s, serr := a.sender(b)
		if serr != nil {
			return deliveryFailed(deliveryOutcome{err: serr, permanent: true}, info.Attempt)
		}
		if o := s.send(ctx, b.FailureURL, p.DeliveryID+"/failed", body); o.err != nil {
			return deliveryFailed(o, info.Attempt)
		}
	}
	return nil
}

// retryableDelivery says whether a delivery error will be tried again.
func retryableDelivery(err error) bool {
	var app *temporal.ApplicationError
	return !errors.As(err, &app) || !app.NonRetryable()
}
