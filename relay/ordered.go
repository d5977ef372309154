package relay

import (
	"context"
	"errors"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/workflows"
)

// orderedKeysPerPass bounds the keys one pass starts deliveries for; the next pass takes more.
const orderedKeysPerPass = 500

// startOrdered starts the delivery of every ordered key of src whose next record can go out
// (store.OrderedKeysDue). A key's delivery has the key's workflow id, so a start for a key
// whose delivery runs already finds that run: the relay claims nothing for ordered keys, the
// key's delivery claims its records itself, one run after another.
func (r *Relay) startOrdered(ctx context.Context, src Source) error {
	scope := r.cfg.Ordered.scope(src.Name)
	if !scope.On() {
		return nil
	}
	keys, err := src.Store.OrderedKeysDue(ctx, scope, r.paused().TopicPatterns(), orderedKeysPerPass)
	if err != nil || len(keys) == 0 {
		return err
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, r.cfg.StartWorkers)
	)
	for _, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := r.startKey(ctx, src.Name, key, scope); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *Relay) startKey(ctx context.Context, source, key string, scope courier.OrderedScope) error {
	opts := client.StartWorkflowOptions{
		ID:                       courier.OutboxKeyWorkflowID(source, key),
		TaskQueue:                courier.KindOutboxKey.TaskQueue(r.cfg.TaskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		EnableEagerStart:         true,
		TypedSearchAttributes:    workflows.StartAttributes(courier.KindOutboxKey, courier.RunAttributes{Source: source}),
	}
	_, err := r.tc.ExecuteWorkflow(ctx, opts, courier.KindOutboxKey.Workflow, workflows.OutboxOrderedParams{
		Source: source, Key: key, Scope: scope, Max: r.cfg.Ordered.Max, Retry: r.cfg.Retry,
	})
	return err
}
