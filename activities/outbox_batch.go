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
)

// HandOverDelay is how long a record taken out of its batch waits before the relay starts its
// own delivery: the first retry's backoff.
const HandOverDelay = time.Second

// PublishBatch publishes a batch of records at once (message id = outbox id, so the broker
// drops what an earlier attempt of the same batch already stored) and marks the published ones
// sent in one statement. A record that fails to publish, or breaks the message rule, leaves the
// batch: its attempt is counted with its error and it is pending again, and the relay starts a
// delivery of its own for it, with the per-record retries, dead-lettering and redrive. The
// activity itself fails (and is retried) only when the database does.
func (a *Outbox) PublishBatch(ctx context.Context, p contract.BatchParams) (contract.BatchResult, error) {
	st, err := a.store(p.Source)
	if err != nil {
		return contract.BatchResult{}, err
	}
	source := p.Source
	if source == "" {
		source = courier.DefaultSource
	}
	recs, err := st.LoadOutboxBatch(ctx, p.IDs)
	if err != nil {
		return contract.BatchResult{}, fmt.Errorf("load outbox batch: %w", err)
	}
	var (
		res     = contract.BatchResult{Skipped: len(p.IDs) - len(recs)}
		pending []courier.OutboxRecord
		handed  = map[int64]string{}
	)
	for _, rec := range recs {
		if rec.Status == courier.OutboxSent || rec.Status == courier.OutboxDead {
			res.Skipped++
			continue
		}
		if err := refuse(rec); err != nil {
			var app *temporal.ApplicationError
			errors.As(err, &app)
			handed[rec.ID] = app.Message()
			continue
		}
		if a.isPaused(rec.Topic) {
			if _, err := st.HoldOutbox(ctx, rec.ID, HoldDelay); err != nil {
				return contract.BatchResult{}, fmt.Errorf("hold outbox %d while its topic is paused: %w", rec.ID, err)
			}
			res.Held = append(res.Held, rec.ID)
			continue
		}
		pending = append(pending, rec)
	}
	msgs := make([]mq.Message, len(pending))
	for i, rec := range pending {
		msgs[i] = mq.Message{ID: courier.OutboxMessageID(source, rec.ID), Topic: rec.Topic, Key: rec.Key,
			Payload: rec.Payload, Headers: rec.Headers}
	}
	errs := mq.PublishAll(ctx, a.pub, msgs)
	published := make([]int64, 0, len(pending))
	for i, rec := range pending {
		if errs[i] != nil {
			handed[rec.ID] = errs[i].Error()
			if a.metrics != nil {
				a.metrics.Failures.WithLabelValues(source, rec.Topic).Inc()
			}
			continue
		}
		published = append(published, rec.ID)
	}
	// Published but not yet marked: if this fails, the retried attempt publishes again with the
	// same message ids, which the broker drops as duplicates.
	n, err := st.MarkOutboxSentBatch(ctx, published)
	if err != nil {
		return contract.BatchResult{}, fmt.Errorf("mark outbox batch sent: %w", err)
	}
	res.Sent = int(n)
	res.Skipped += len(published) - int(n)
	if a.metrics != nil {
		now := a.now()
		for i, rec := range pending {
			if errs[i] == nil {
				a.metrics.Published.WithLabelValues(source, rec.Topic).Inc()
				a.metrics.ObserveLatency(source, now.Sub(rec.CreatedAt).Seconds())
			}
		}
	}
	var herrs []error
	for _, rec := range recs {
		reason, ok := handed[rec.ID]
		if !ok {
			continue
		}
		if _, err := st.HandOutboxToRecord(ctx, rec.ID, reason, HandOverDelay); err != nil {
			herrs = append(herrs, err)
			continue
		}
		res.Handed = append(res.Handed, rec.ID)
	}
	if len(herrs) > 0 {
		// The published rows are marked; the retry publishes the failed ones again, or hands
		// them over once the database answers.
		return contract.BatchResult{}, fmt.Errorf("hand %d failed records to their own deliveries: %w", len(herrs), errors.Join(herrs...))
	}
	if len(res.Handed) > 0 {
		activity.GetLogger(ctx).Info("records left their batch for deliveries of their own", "source", source, "ids", res.Handed)
	}
	return res, nil
}

// HandBatch hands every unsent record of a batch whose delivery gave up to a delivery of its
// own, so a batch never strands its records.
func (a *Outbox) HandBatch(ctx context.Context, p contract.HandParams) error {
	st, err := a.store(p.Source)
	if err != nil {
		return err
	}
	for _, id := range p.IDs {
		if _, err := st.HandOutboxToRecord(ctx, id, p.LastError, HandOverDelay); err != nil {
			return fmt.Errorf("hand outbox %d to its own delivery: %w", id, err)
		}
	}
	return nil
}
