package workflows

import (
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// ErrTypeOutboxKeyBlocked is the failure type of a key's delivery run that left its key blocked:
// once the blocking record is marked dead (the row stays the source of truth), the run upserts
// CourierState "dead" with the record's CourierRecordID and CourierTopic and ends Failed, its
// message naming the record and its last error, its details the OutboxOrderedResult. So the
// dead record shows in the Temporal UI as a Failed run, as a per-record delivery's does
// (ErrTypeOutboxDead).
const ErrTypeOutboxKeyBlocked = "OutboxKeyBlocked"

// orderedBlockedFails marks the change that made a run that blocks its key fail (and upsert the
// record's search attributes) rather than complete: runs recorded before it replay as they ran.
const orderedBlockedFails = "ordered-blocked-key-fails"

// OutboxOrderedParams is the key delivery's input.
type OutboxOrderedParams struct {
	Source string
	Key    string
	Scope  courier.OrderedScope // which records of the source are ordered
	Max    int                  // records per claim (and so per publish activity); default 100
	Retry  courier.RetryPolicy  // the budget of each record; zero fields take DefaultOutboxRetry's
	Sent   int                  // records sent by the runs before this one (continue-as-new)
}

// OutboxOrderedResult is how the key's delivery ended.
type OutboxOrderedResult struct {
	Sent      int   // records published, in all the key's runs since the relay started it
	BlockedBy int64 // the record that blocks the key (it is dead); zero if none
	Paused    bool  // the key's next record is of a paused topic
}

// orderedRunIterations bounds one run's claims before it continues as new, so its history
// stays small whatever the key's volume.
const orderedRunIterations = 200

// orderedClaimOptions retry a claim until the database answers.
var orderedClaimOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
}

// OutboxOrdered delivers one key's records one after another in commit order, then ends when
// the key has no record left (the relay starts it again for the next one). Each claim takes
// the key's next records and publishes them in one local activity, each acknowledged before
// the next. A record that fails is retried with the budget's backoff (its attempts are
// counted on its row, so the budget holds across crashes and runs), and the records after it
// wait; once its budget is spent, or at once for a permanent failure, it is dead and the key
// is blocked behind it, and the run ends Failed (ErrTypeOutboxKeyBlocked): only an operator's
// redrive or skip lets the key flow again. One run per key at a time: its id is the key's (courier.OutboxKeyWorkflowID).
func OutboxOrdered(ctx workflow.Context, p OutboxOrderedParams) (OutboxOrderedResult, error) {
	retry := OutboxRetry(p.Retry)
	res := OutboxOrderedResult{Sent: p.Sent}
	cctx := workflow.WithLocalActivityOptions(ctx, orderedClaimOptions)
	timeout := min(retry.AttemptTimeout, LocalAttemptTimeout)
	pctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: timeout,
		StartToCloseTimeout:    timeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	// unrecorded counts attempts on the current first record that ended without writing
	// their row (the worker died, the attempt timed out): they still spend the budget.
	unrecorded, head := 0, int64(0)
	for i := 0; i < orderedRunIterations && !workflow.GetInfo(ctx).GetContinueAsNewSuggested(); i++ {
		var claim contract.ClaimOrderedResult
		if err := workflow.ExecuteLocalActivity(cctx, contract.ClaimOrderedName, contract.ClaimOrderedParams{
			Source: p.Source, Key: p.Key, Scope: p.Scope, Max: p.Max, Lease: retry.AttemptTimeout + time.Minute,
		}).Get(ctx, &claim); err != nil {
			return res, err
		}
		if claim.Paused {
			res.Paused = true
		}
		if len(claim.IDs) == 0 {
			return res, nil // done, blocked (an operator unblocks it) or paused (resume starts it)
		}
		if claim.IDs[0] != head {
			head, unrecorded = claim.IDs[0], 0
		}
		var pub contract.PublishOrderedResult
		err := workflow.ExecuteLocalActivity(pctx, contract.PublishOrderedName, contract.PublishOrderedParams{
			Source: p.Source, IDs: claim.IDs, RetryIn: orderedBackoff(retry, claim.Attempts+unrecorded+1),
		}).Get(ctx, &pub)
		if err != nil {
			unrecorded++
			attempts := claim.Attempts + unrecorded
			if attempts >= int(retry.MaxAttempts) {
				return blockKey(ctx, p.Source, head, rootMessage(err), res)
			}
			if err := workflow.Sleep(ctx, orderedBackoff(retry, attempts)); err != nil {
				return res, err
			}
			continue
		}
		res.Sent += pub.Sent
		switch {
		case pub.FailedID == 0:
			continue
		case pub.Held:
			res.Paused = true
			return res, nil
		}
		attempts := pub.FailedAttempts
		if pub.FailedID == head {
			attempts += unrecorded
		} else {
			head, unrecorded = pub.FailedID, 0
		}
		if pub.Permanent || attempts >= int(retry.MaxAttempts) {
			return blockKey(ctx, p.Source, pub.FailedID, pub.LastError, res)
		}
		if err := workflow.Sleep(ctx, orderedBackoff(retry, attempts)); err != nil {
			return res, err
		}
	}
	p.Sent = res.Sent
	return res, workflow.NewContinueAsNewError(ctx, courier.KindOutboxKey.Workflow, p)
}

// blockKey marks the record dead and blocks its key, retried until the database answers, then
// ends the run Failed with the record's id and last error (ErrTypeOutboxKeyBlocked), its state
// and record upserted first: the value a run last upserted is what the Temporal UI's filters
// see once it has closed.
func blockKey(ctx workflow.Context, source string, id int64, lastErr string, res OutboxOrderedResult) (OutboxOrderedResult, error) {
	bctx := workflow.WithActivityOptions(ctx, markDeadOptions)
	var blocked contract.BlockOrderedResult
	if err := workflow.ExecuteActivity(bctx, contract.BlockOrderedName,
		contract.BlockOrderedParams{Source: source, ID: id, LastError: lastErr}).Get(ctx, &blocked); err != nil {
		return res, err
	}
	res.BlockedBy = id
	if workflow.GetVersion(ctx, orderedBlockedFails, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return res, nil // a run recorded before the change completed here
	}
	if !blocked.Blocked {
		// Sent meanwhile (a retried attempt got through after all): nothing is dead, nothing
		// blocked, and the key's next run delivers the rest.
		res.BlockedBy = 0
		return res, nil
	}
	sas := []temporal.SearchAttributeUpdate{saState.ValueSet(string(courier.OutboxDead)), saRecord.ValueSet(id)}
	if blocked.Topic != "" {
		sas = append(sas, saTopic.ValueSet(blocked.Topic))
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, sas...)
	return res, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("outbox record %d is dead and blocks its key: %s", id, lastErr), ErrTypeOutboxKeyBlocked, nil, res)
}

// orderedBackoff is the wait after a record's attempts-th failed attempt, as the budget gives
// it: the initial interval times the coefficient per attempt before, capped at the longest.
func orderedBackoff(r courier.RetryPolicy, attempts int) time.Duration {
	d := float64(r.InitialInterval) * math.Pow(r.BackoffCoef, float64(max(attempts, 1)-1))
	if d <= 0 || d > float64(r.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
		return r.MaxInterval
	}
	return time.Duration(d)
}
