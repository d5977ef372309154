package activities

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/metrics"
	"github.com/courier-oss/courier/mq"
)

// OutboxStore is what the outbox activities need from a database holding an outbox table.
type OutboxStore interface {
	GetOutbox(ctx context.Context, id int64) (courier.OutboxRecord, error)
	RecordOutboxAttempt(ctx context.Context, id int64, lastErr string, retryIn time.Duration) error
	MarkOutboxSent(ctx context.Context, id int64) (bool, error)
	MarkOutboxDead(ctx context.Context, id int64, lastErr string) (bool, error)
	// The batch mode's statements (outbox_batch.go).
	LoadOutboxBatch(ctx context.Context, ids []int64) ([]courier.OutboxRecord, error)
	MarkOutboxSentBatch(ctx context.Context, ids []int64) (int64, error)
	HandOutboxToRecord(ctx context.Context, id int64, lastErr string, retryIn time.Duration) (bool, error)
	// HoldOutbox hands a record of a paused topic back to pending without an attempt.
	HoldOutbox(ctx context.Context, id int64, retryIn time.Duration) (bool, error)
}

// Outbox delivers outbox records to the message queue.
type Outbox struct {
	sources map[string]OutboxStore
	pub     mq.Publisher
	metrics *metrics.Outbox
	now     func() time.Time
	paused  func() courier.Pauses // nil: nothing is ever paused
}

// NewOutbox builds the outbox activities over the named outbox sources ("default" is courier's
// own database), a publisher, and optional metrics (nil records nothing).
func NewOutbox(sources map[string]OutboxStore, pub mq.Publisher, m *metrics.Outbox) *Outbox {
	return &Outbox{sources: sources, pub: pub, metrics: m, now: time.Now}
}

// WithPauses makes the activities consult the pauses in force before each publish: a record
// whose topic matches a paused pattern is not published and no attempt is counted
// (docs/flow-control.md). It returns a.
func (a *Outbox) WithPauses(current func() courier.Pauses) *Outbox {
	a.paused = current
	return a
}

// HoldDelay is how long a record a delivery found paused waits before a claim may take it:
// longer than the pauses' refresh, so a relay that has not yet read the pause does not claim
// it again while the delivery that held it is still closing.
const HoldDelay = 2 * time.Second

// isPaused reports whether topic is paused now.
func (a *Outbox) isPaused(topic string) bool {
	if a.paused == nil {
		return false
	}
	_, ok := a.paused().Topic(topic)
	return ok
}

func (a *Outbox) store(source string) (OutboxStore, error) {
	if source == "" {
		source = courier.DefaultSource
	}
	st, ok := a.sources[source]
	if !ok {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("outbox source %q is not configured on this worker", source), contract.ErrTypeUnknownSource, nil)
	}
	return st, nil
}

// Deliver publishes one record (message id = outbox id) and marks it sent. A record that is
// already sent is not published again. A failed attempt is counted on the row with its error
// before the error is returned for Temporal to retry.
func (a *Outbox) Deliver(ctx context.Context, p contract.DeliverParams) (contract.DeliverResult, error) {
	st, err := a.store(p.Source)
	if err != nil {
		return contract.DeliverResult{}, err
	}
	rec, err := st.GetOutbox(ctx, p.ID)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return contract.DeliverResult{}, temporal.NewNonRetryableApplicationError(err.Error(), contract.ErrTypeOutboxNotFound, err)
	}
	if err != nil {
		return contract.DeliverResult{}, fmt.Errorf("load outbox %d: %w", p.ID, err)
	}
	if rec.Status == courier.OutboxSent {
		return contract.DeliverResult{AlreadySent: true}, nil
	}
	if err := refuse(rec); err != nil {
		return contract.DeliverResult{}, err
	}
	if a.isPaused(rec.Topic) {
		if _, err := st.HoldOutbox(ctx, rec.ID, HoldDelay); err != nil {
			return contract.DeliverResult{}, fmt.Errorf("hold outbox %d while its topic is paused: %w", rec.ID, err)
		}
		return contract.DeliverResult{Paused: true}, nil
	}
	source := p.Source
	if source == "" {
		source = courier.DefaultSource
	}
	pctx, cancel := publishContext(ctx)
	defer cancel()
	perr := a.pub.Publish(pctx, mq.Message{
		ID:      courier.OutboxMessageID(source, rec.ID),
		Topic:   rec.Topic,
		Key:     rec.Key,
		Payload: rec.Payload,
		Headers: rec.Headers,
	})
	if perr != nil {
		if a.metrics != nil {
			a.metrics.Failures.WithLabelValues(source, rec.Topic).Inc()
		}
		// The attempt is recorded on a context of its own: the publish may have ended because
		// the attempt's time ran out, and the row must still say so.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), recordReserve)
		defer rcancel()
		if rerr := st.RecordOutboxAttempt(rctx, rec.ID, perr.Error(), nextRetryIn(activity.GetInfo(ctx))); rerr != nil {
			activity.GetLogger(ctx).Warn("could not record failed attempt", "id", rec.ID, "error", rerr)
		}
		// Every failed attempt is benign to the SDK's log: the retries are expected, and a record
		// that can never be published is logged once, at ERROR, when it goes dead (MarkDead).
		typ, permanent := contract.ErrTypePublishRetry, false
		switch {
		case errors.Is(perr, mq.ErrUnknownTopic):
			typ, permanent = contract.ErrTypeUnknownTopic, true
		case errors.Is(perr, mq.ErrRefused):
			typ, permanent = contract.ErrTypeRefusedMessage, true
		}
		return contract.DeliverResult{}, temporal.NewApplicationErrorWithOptions(perr.Error(), typ,
			temporal.ApplicationErrorOptions{Cause: perr, NonRetryable: permanent, Category: temporal.ApplicationErrorCategoryBenign})
	}
	sent, err := st.MarkOutboxSent(ctx, rec.ID)
	if err != nil {
		// Published but not marked: the retry publishes again with the same message id, which
		// the broker drops as a duplicate.
		return contract.DeliverResult{}, fmt.Errorf("mark outbox %d sent: %w", rec.ID, err)
	}
	if a.metrics != nil && sent {
		a.metrics.Published.WithLabelValues(source, rec.Topic).Inc()
		a.metrics.ObserveLatency(source, a.now().Sub(rec.CreatedAt).Seconds())
	}
	return contract.DeliverResult{AlreadySent: !sent}, nil
}

// recordReserve is the time an attempt keeps back from its publish to record a failure: the
// publish gives up that long before the attempt's deadline, so the row is written within the
// attempt's time (a local first attempt never holds its workflow task past its budget) and
// the API shows the attempt as soon as it ended.
const recordReserve = time.Second

// publishContext is ctx for the publish: it ends recordReserve before ctx's deadline (a
// quarter of the time left, if that is less).
func publishContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	reserve := min(recordReserve, time.Until(deadline)/4)
	return context.WithDeadline(ctx, deadline.Add(-reserve))
}

// refuse returns a non-retryable error for a row that must never reach the broker: rows written
// straight into an outbox table skip the API's checks, so the relay applies the same rule.
func refuse(rec courier.OutboxRecord) error {
	msg := rec.Malformed
	if msg == "" {
		if err := courier.CheckMessage(rec.Topic, rec.Key, rec.Headers); err != nil {
			var ce *courier.Error
			if errors.As(err, &ce) {
				msg = ce.Message
			} else {
				msg = err.Error()
			}
		}
	}
	if msg == "" {
		return nil
	}
	return temporal.NewNonRetryableApplicationError("refused, never published: "+msg, contract.ErrTypeRefusedMessage, nil)
}

// MarkDead marks a record dead with its last error once its retry budget is spent.
func (a *Outbox) MarkDead(ctx context.Context, p contract.MarkDeadParams) error {
	st, err := a.store(p.Source)
	if err != nil {
		return err
	}
	marked, err := st.MarkOutboxDead(ctx, p.ID, p.LastError)
	if err != nil {
		return fmt.Errorf("mark outbox %d dead: %w", p.ID, err)
	}
	if marked {
		// Once per record, when it goes dead: the retries before it were expected conditions.
		activity.GetLogger(ctx).Error("outbox record is dead: its retry budget is spent or it can never be published; redrive it once the cause is fixed",
			"source", p.Source, "id", p.ID, "error", p.LastError)
	}
	if marked && a.metrics != nil {
		rec, err := st.GetOutbox(ctx, p.ID)
		topic := ""
		if err == nil {
			topic = rec.Topic
		}
		source := p.Source
		if source == "" {
			source = courier.DefaultSource
		}
		a.metrics.Dead.WithLabelValues(source, topic).Inc()
	}
	return nil
}

// nextRetryIn estimates when Temporal will run the next attempt, from the activity's retry
// policy, for display in next_attempt_at.
func nextRetryIn(info activity.Info) time.Duration {
	rp := info.RetryPolicy
	if rp == nil || rp.InitialInterval <= 0 {
		return time.Second
	}
	coef := rp.BackoffCoefficient
	if coef < 1 {
		coef = 2
	}
	d := float64(rp.InitialInterval) * math.Pow(coef, float64(info.Attempt-1))
	if rp.MaximumInterval > 0 && d > float64(rp.MaximumInterval) {
		d = float64(rp.MaximumInterval)
	}
	return time.Duration(d)
}
