package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/mq"
	"github.com/courier-oss/courier/store"
)

// OrderedStore is what the ordered mode needs from an outbox source (docs/flow-control.md,
// "Ordered keys in the outbox"), besides OutboxStore.
type OrderedStore interface {
	ClaimOrdered(ctx context.Context, key, workflowID string, scope courier.OrderedScope, limit int, lease time.Duration, paused func(topic string) bool) (store.OrderedClaim, error)
	BlockKey(ctx context.Context, id int64, lastErr string) (bool, error)
	ReleaseOutbox(ctx context.Context, ids []int64, retryIn time.Duration) error
}

func (a *Outbox) orderedStore(source string) (OutboxStore, OrderedStore, error) {
	st, err := a.store(source)
	if err != nil {
		return nil, nil, err
	}
	ost, ok := st.(OrderedStore)
	if !ok {
		return nil, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("outbox source %q does not support the ordered mode", source), contract.ErrTypeUnknownSource, nil)
	}
	return st, ost, nil
}

// ClaimOrdered takes a key's next records in commit order for its delivery run: nothing when
// the key has none left, is blocked, or its next record's topic is paused.
func (a *Outbox) ClaimOrdered(ctx context.Context, p contract.ClaimOrderedParams) (contract.ClaimOrderedResult, error) {
	_, ost, err := a.orderedStore(p.Source)
	if err != nil {
		return contract.ClaimOrderedResult{}, err
	}
	// The rows name the key's run as theirs (workflow_id): the run that delivers them.
	c, err := ost.ClaimOrdered(ctx, p.Key, courier.OutboxKeyWorkflowID(p.Source, p.Key), p.Scope, max(p.Max, 1), p.Lease, a.isPaused)
	if err != nil {
		return contract.ClaimOrderedResult{}, fmt.Errorf("claim the next records of key %q: %w", p.Key, err)
	}
	return contract.ClaimOrderedResult{IDs: c.IDs, Attempts: c.Attempts, Blocked: c.Blocked, Paused: c.Paused}, nil
}

// PublishOrdered publishes claimed records of one key one after another, each acknowledged
// before the next is sent, so the broker receives them in commit order. It stops at the first
// that fails: that one has its attempt counted with its error, the ones after it go back to
// pending behind it, and the ones before it are marked sent. A record of a paused topic stops
// it the same way without an attempt. The activity itself fails only when the database does;
// a retry publishes again with the same message ids, which the broker drops.
func (a *Outbox) PublishOrdered(ctx context.Context, p contract.PublishOrderedParams) (contract.PublishOrderedResult, error) {
	st, ost, err := a.orderedStore(p.Source)
	if err != nil {
		return contract.PublishOrderedResult{}, err
	}
	source := p.Source
	if source == "" {
		source = courier.DefaultSource
	}
	loaded, err := st.LoadOutboxBatch(ctx, p.IDs)
	if err != nil {
		return contract.PublishOrderedResult{}, fmt.Errorf("load ordered records: %w", err)
	}
	byID := make(map[int64]courier.OutboxRecord, len(loaded))
	for _, r := range loaded {
		byID[r.ID] = r
	}
	var (
		res       contract.PublishOrderedResult
		published []int64
		stop      = len(p.IDs)
	)
	for i, id := range p.IDs {
		rec, ok := byID[id]
		if !ok || rec.Status == courier.OutboxSent || rec.Status == courier.OutboxDead {
			continue // gone, or done by an earlier attempt of this activity
		}
		if err := refuse(rec); err != nil {
			var app *temporal.ApplicationError
			errors.As(err, &app)
			res.FailedID, res.LastError, res.Permanent, res.FailedAttempts = id, app.Message(), true, rec.Attempts+1
			stop = i
			break
		}
		if a.isPaused(rec.Topic) {
			res.FailedID, res.Held = id, true
			stop = i
			break
		}
		pctx, cancel := publishContext(ctx)
		perr := a.pub.Publish(pctx, mq.Message{ID: courier.OutboxMessageID(source, id), Topic: rec.Topic, Key: rec.Key,
			Payload: rec.Payload, Headers: rec.Headers})
		cancel()
		if perr != nil {
			if a.metrics != nil {
				a.metrics.Failures.WithLabelValues(source, rec.Topic).Inc()
			}
			res.FailedID, res.LastError, res.FailedAttempts = id, perr.Error(), rec.Attempts+1
			res.Permanent = errors.Is(perr, mq.ErrUnknownTopic) || errors.Is(perr, mq.ErrRefused)
			stop = i
			break
		}
		published = append(published, id)
	}
	// Records are written on a context of their own: the publish may have ended because the
	// attempt's time ran out, and the rows must still say what happened.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), recordReserve)
	defer wcancel()
	n, err := st.MarkOutboxSentBatch(wctx, published)
	if err != nil {
		return contract.PublishOrderedResult{}, fmt.Errorf("mark ordered records sent: %w", err)
	}
	res.Sent = int(n)
	if a.metrics != nil {
		now := a.now()
		for _, id := range published {
			a.metrics.Published.WithLabelValues(source, byID[id].Topic).Inc()
			a.metrics.ObserveLatency(source, now.Sub(byID[id].CreatedAt).Seconds())
		}
	}
	if res.FailedID == 0 {
		return res, nil
	}
	if !res.Held {
		if err := st.RecordOutboxAttempt(wctx, res.FailedID, res.LastError, p.RetryIn); err != nil {
			return contract.PublishOrderedResult{}, fmt.Errorf("record the failed attempt of outbox %d: %w", res.FailedID, err)
		}
	}
	back := p.IDs[stop+1:]
	if res.Held {
		back = p.IDs[stop:]
	}
	if err := ost.ReleaseOutbox(wctx, back, 0); err != nil {
		return contract.PublishOrderedResult{}, fmt.Errorf("hand back the records behind outbox %d: %w", res.FailedID, err)
	}
	return res, nil
}

// BlockOrdered marks a key's record dead once its budget is spent (or it can never be
// published) and blocks its key behind it. It answers whether the record blocks its key (not
// when it was sent meanwhile) and its topic, which the key's run shows when it fails.
func (a *Outbox) BlockOrdered(ctx context.Context, p contract.BlockOrderedParams) (contract.BlockOrderedResult, error) {
	st, ost, err := a.orderedStore(p.Source)
	if err != nil {
		return contract.BlockOrderedResult{}, err
	}
	blocked, err := ost.BlockKey(ctx, p.ID, p.LastError)
	if err != nil {
		return contract.BlockOrderedResult{}, fmt.Errorf("block the key of outbox %d: %w", p.ID, err)
	}
	if !blocked {
		return contract.BlockOrderedResult{}, nil
	}
	source := p.Source
	if source == "" {
		source = courier.DefaultSource
	}
	topic := ""
	if rec, err := st.GetOutbox(ctx, p.ID); err == nil {
		topic = rec.Topic
	}
	// Once per record, when it blocks its key: the retries before it were expected.
	activity.GetLogger(ctx).Error("ordered outbox record is dead and blocks its key; redrive it once the cause is fixed, or skip it",
		"source", source, "id", p.ID, "topic", topic, "error", p.LastError)
	if a.metrics != nil {
		a.metrics.Dead.WithLabelValues(source, topic).Inc()
	}
	return contract.BlockOrderedResult{Blocked: true, Topic: topic}, nil
}
