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
		NotifyFailure: b.FailureURL != "" || b.FailureTopic != "",
	}, nil
}

// Deliver sends one fired timer and returns the attempt number that succeeded. 429, 5xx and
// timeouts are retried by the workflow's policy (a Retry-After sets the next delay); other
// statuses and refused targets fail at once.
func (a *Timers) Deliver(ctx context.Context, p contract.DeliverTimerParams) (n int, err error) {
	attempt := activity.GetInfo(ctx).Attempt
	if attempt == 1 && a.metrics != nil && !p.FireAt.IsZero() {
		a.metrics.ObserveLateness(p.BizType, time.Since(p.FireAt).Seconds())
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
		if err != nil {
			return 0, deliveryFailed(err, attempt, errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused), 0)
		}
		return int(attempt), nil
	case courier.DeliveryHTTP:
		signer, err := webhook.NewSigner(b.Secrets...)
		if err != nil {
			return 0, deliveryFailed(err, attempt, true, 0)
		}
		client := a.clients.Client(callback.Options{AllowPrivate: b.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: b.RequestTimeout})
		err = client.Send(ctx, callback.Request{URL: b.CallbackURL, DeliveryID: p.DeliveryID, Body: body, Signer: signer})
		var ce *callback.Error
		switch {
		case errors.As(err, &ce):
			return 0, deliveryFailed(err, attempt, !ce.Retryable, ce.RetryAfter)
		case err != nil:
			return 0, deliveryFailed(err, attempt, false, 0)
		}
		return int(attempt), nil
	}
	return 0, deliveryFailed(fmt.Errorf("unknown delivery %q", b.Delivery), attempt, true, 0)
}

// deliveryFailed is how a failed delivery attempt ends: a permanent failure is not retried; the
// others (the receiver down, busy or answering 5xx or 429) are retried after retryAfter when the
// receiver asked for it. Both are benign, so the SDK does not log every attempt as an error: a
// timer that fails for good is logged once, by its run. Both carry the attempt's number in
// their details, so a timer that fails for good says how many attempts it made.
func deliveryFailed(err error, attempt int32, permanent bool, retryAfter time.Duration) error {
	typ := contract.ErrTypeRetryableDelivery
	if permanent {
		typ = contract.ErrTypePermanentDelivery
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), typ, temporal.ApplicationErrorOptions{
		NonRetryable: permanent, Cause: err, NextRetryDelay: retryAfter, Category: temporal.ApplicationErrorCategoryBenign,
		Details: []any{contract.DeliveryAttempt{Attempt: int(attempt)}}})
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
		err = a.pub.Publish(ctx, mq.Message{ID: courier.TimerWorkflowID(p.BizType, p.BizID) + "/" + p.DeliveryID + "/failed",
			Topic: b.FailureTopic, Key: p.BizID, Payload: body})
		if err != nil {
			return deliveryFailed(err, info.Attempt, errors.Is(err, mq.ErrUnknownTopic) || errors.Is(err, mq.ErrRefused), 0)
		}
	}
	if b.FailureURL != "" {
		signer, serr := webhook.NewSigner(b.Secrets...)
		if serr != nil {
			return deliveryFailed(serr, info.Attempt, true, 0)
		}
		client := a.clients.Client(callback.Options{AllowPrivate: b.AllowPrivate, AllowLoopback: a.allowLoopback, Timeout: b.RequestTimeout})
		err = client.Send(ctx, callback.Request{URL: b.FailureURL, DeliveryID: p.DeliveryID + "/failed", Body: body, Signer: signer})
		var ce *callback.Error
		switch {
		case errors.As(err, &ce):
			return deliveryFailed(err, info.Attempt, !ce.Retryable, ce.RetryAfter)
		case err != nil:
			return deliveryFailed(err, info.Attempt, false, 0)
		}
	}
	return nil
}

// retryableDelivery says whether a delivery error will be tried again.
func retryableDelivery(err error) bool {
	var app *temporal.ApplicationError
	return !errors.As(err, &app) || !app.NonRetryable()
}
