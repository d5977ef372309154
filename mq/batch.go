package mq

import (
	"context"
	"sync"
)

// BatchPublisher is implemented by adapters that publish many messages with their
// acknowledgements in flight at once (NATS JetStream's asynchronous publish). Callers use
// PublishAll, which falls back to concurrent Publish calls for adapters without it.
type BatchPublisher interface {
	// PublishBatch publishes every message and returns one error per message, in order: nil
	// once the broker acknowledged that message durably, as Publish would report it otherwise.
	// Messages fail one by one; a batch is never all-or-nothing.
	PublishBatch(ctx context.Context, msgs []Message) []error
}

// batchConcurrency bounds the Publish calls PublishAll runs at once for an adapter that has no
// PublishBatch of its own.
const batchConcurrency = 32

// PublishAll publishes msgs through p and returns one error per message, in order (nil: acked).
// It uses p's PublishBatch when p has one, otherwise up to 32 concurrent Publish calls.
func PublishAll(ctx context.Context, p Publisher, msgs []Message) []error {
	if bp, ok := p.(BatchPublisher); ok {
		return bp.PublishBatch(ctx, msgs)
	}
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchConcurrency)
	for i := range msgs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = p.Publish(ctx, msgs[i])
		}()
	}
	wg.Wait()
	return errs
}
