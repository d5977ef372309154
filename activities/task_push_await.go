package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/callback"
)

// PushAwait is the one activity of an attempt with a heartbeat timeout
// (contract.PushAwaitName): it pushes the attempt to the queue's worker and then stays open
// until the gateway completes it by its id with the worker's result (contract.AttemptResult).
// A worker that reports before it has answered the push completes it the same way, since the
// activity is open from the first try.
//
// A try that fails on the way (no connection, no answer within the push timeout, 429 or 5xx)
// is tried again after the worker's Retry-After (at most contract.PushRetryMax) or
// contract.PushBackoff, up to courier.PushTries tries and never past the attempt's deadline; a
// 4xx answer, a refused address, or the last try failing fails the attempt. While it pushes it heartbeats (when the
// queue has a heartbeat timeout), so a worker slow to accept never loses its attempt to the
// heartbeat timeout; once the worker has accepted, it records one more heartbeat, so the
// worker's heartbeat timeout runs from then.
func (a *Tasks) PushAwait(ctx context.Context, p contract.PushTaskParams) (contract.AttemptResult, error) {
	info := activity.GetInfo(ctx)
	stop := heartbeatWhilePushing(ctx, info.HeartbeatTimeout) // from the start: marking pushed may retry for seconds
	pr, err := a.preparePush(ctx, p, info.WorkflowExecution.RunID)
	if err == nil {
		err = a.pushTries(ctx, pr, p.PushTimeout)
	}
	stop()
	if err != nil {
		return contract.AttemptResult{}, err
	}
	a.observePushed(pr.target.Task, p.Attempt)
	if info.HeartbeatTimeout > 0 {
		// A heartbeat without details: the SDK sends it now or, inside its throttle window, as
		// the activity returns (it flushes the last one then). Either way the worker's heartbeat
		// timeout runs from about now, and a timeout from here on has no "pushing" detail.
		activity.RecordHeartbeat(ctx)
	}
	return contract.AttemptResult{}, activity.ErrResultPending
}

// pushTries sends the push until the worker accepts it, a try fails for good, the tries are
// spent, or no time is left before the deadline (the activity's own).
func (a *Tasks) pushTries(ctx context.Context, pr pushRequest, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = courier.DefaultPushTimeout
	}
	for try := 1; ; try++ {
		err := a.client(pr.target.Queue, timeout).Send(ctx, pr.req)
		var ce *callback.Error
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err() // the deadline or a cancel: Temporal classifies it
		case !errors.As(err, &ce) || !ce.Retryable:
			return pushFailed("push: " + err.Error())
		case try >= courier.PushTries:
			return pushFailed(fmt.Sprintf("push: %d tries failed on the way, the last: %v", try, err))
		}
		wait := ce.RetryAfter
		if wait <= 0 {
			wait = contract.PushBackoff(try)
		}
		if wait > contract.PushRetryMax {
			// The wait would hold a push slot that other queues' pushes share: the queue's
			// retry policy waits instead, holding nothing.
			return pushFailed(fmt.Sprintf("push: %v; the worker asked to wait %s, longer than courier waits within an attempt (%s)",
				err, wait, contract.PushRetryMax))
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return pushFailed(fmt.Sprintf("push: %v; no time for another try before the deadline", err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func pushFailed(msg string) error { return refusedPush(msg, nil) }

// refusedPush ends an attempt whose push the worker refused (a 4xx, a refused address): the
// attempt fails and the queue's retry policy decides what follows, which is an expected outcome
// (benign: not logged as an error; a task that fails for good is logged once).
func refusedPush(msg string, cause error) error {
	return temporal.NewApplicationErrorWithOptions(msg, contract.ErrTypePushFailed,
		temporal.ApplicationErrorOptions{NonRetryable: true, Cause: cause, Category: temporal.ApplicationErrorCategoryBenign})
}

// heartbeatWhilePushing records contract.PushingDetail often enough to keep a heartbeat
// timeout from firing until stop is called (the SDK sends at most one per 80 % of the
// timeout). Without a heartbeat timeout it does nothing.
func heartbeatWhilePushing(ctx context.Context, timeout time.Duration) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(max(timeout/4, 10*time.Millisecond))
		defer tick.Stop()
		for {
			activity.RecordHeartbeat(ctx, contract.PushingDetail{CourierPushing: true})
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
