package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/callback"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/webhook"
)

// BizTypeStore is what the timer activities need from the database.
type BizTypeStore interface {
	GetBizType(ctx context.Context, name string) (courier.BizType, error)
}

// Timers delivers fired timers: a signed HTTP callback or an MQ publish, per business type.
type Timers struct {
	metrics       *metrics.Timers
	types         BizTypeStore
	pub           mq.Publisher
	allowLoopback bool // courier dev lets callbacks reach 127.0.0.1
	clients       callback.Pool
}

// NewTimers builds the timer activities. allowLoopback is for dev mode only; m may be nil.
func NewTimers(types BizTypeStore, pub mq.Publisher, allowLoopback bool, m *metrics.Timers) *Timers {
	return &Timers{types: types, pub: pub, allowLoopback: allowLoopback, metrics: m}
}

// record counts one attempt's outcome.
func (a *Timers) record(bizType string, err error) {
	if a.metrics == nil {
		return
	}
	outcome := "delivered"
	var ae *temporal.ApplicationError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.NonRetryable():
		outcome = "failed"
	default:
		outcome = "retry"
	}
	a.metrics.Deliveries.WithLabelValues(bizType, outcome).Inc()
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
	}, nil
}

// Deliver sends one fired timer and returns the attempt number that succeeded. 429, 5xx and
// timeouts are retried by the workflow's policy (a Retry-After sets the next delay); other
// statuses and refused targets fail at once.
func (a *Timers) Deliver(ctx context.Context, p contract.DeliverTimerParams) (n int, err error) {
	attempt := activity.GetInfo(ctx).Attempt
	if attempt == 1 && a.metrics != nil && !p.FireAt.IsZero() {
		a.metrics.Lateness.Observe(time.Since(p.FireAt).Seconds())
	}
	defer func() { a.record(p.BizType, err) }()
	b, err := a.bizType(ctx, p.BizType)
	if err != nil {
		return 0, err
	}
	payload := json.RawMessage(p.Payload)
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	body, err := json.Marshal(api.TimerCallback{DeliveryID: p.DeliveryID, BizType: p.BizType, BizID: p.BizID,
		FireAt: p.FireAt.UTC(), Attempt: attempt, Payload: payload})
	if err != nil {
		return 0, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePermanentDelivery, err)
	}
	switch b.Delivery {
	case courier.DeliveryMQ:
		err := a.pub.Publish(ctx, mq.Message{ID: courier.TimerWorkflowID(p.BizType, p.BizID) + "/" + p.DeliveryID,
			Topic: b.Topic, Key: p.BizID, Payload: body})
		if errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused) {
			return 0, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePermanentDelivery, err)
		}
		return int(attempt), err
	case courier.DeliveryHTTP:
		signer, err := webhook.NewSigner(b.Secrets...)
		if err != nil {
			return 0, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypePermanentDelivery, err)
		}
		client := a.clients.Client(callback.Options{AllowPrivate: b.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: b.RequestTimeout})
		err = client.Send(ctx, callback.Request{URL: b.CallbackURL, DeliveryID: p.DeliveryID, Body: body, Signer: signer})
		var ce *callback.Error
		if errors.As(err, &ce) {
			if !ce.Retryable {
				return 0, temporal.NewNonRetryableApplicationError(ce.Error(), contract.ErrTypePermanentDelivery, err)
			}
			return 0, temporal.NewApplicationErrorWithOptions(ce.Error(), contract.ErrTypeRetryableDelivery,
				temporal.ApplicationErrorOptions{NextRetryDelay: ce.RetryAfter, Cause: err})
		}
		return int(attempt), err
	}
	return 0, temporal.NewNonRetryableApplicationError(fmt.Sprintf("unknown delivery %q", b.Delivery), contract.ErrTypePermanentDelivery, nil)
}
