package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// OutboxBatchParams is the batch workflow's input: the claimed records' ids; their payloads stay
// in the database.
type OutboxBatchParams struct {
	Source string
	IDs    []int64
	Retry  courier.RetryPolicy // the publish activity's budget; the per-record deliveries keep their own
}

// OutboxBatch publishes a claimed batch of records in one activity (see
// contract.Outbox.PublishBatch): the published records are sent, and each one that failed has
// left the batch for a delivery of its own, so retries, dead-lettering and redrive stay
// per record. If the activity itself gives up (the database was unreachable through the whole
// budget), every record still unsent is handed to a delivery of its own, so a batch never
// strands a record.
func OutboxBatch(ctx workflow.Context, p OutboxBatchParams) (contract.BatchResult, error) {
	retry := OutboxRetry(p.Retry)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: retry.AttemptTimeout,
		RetryPolicy:         TemporalRetry(retry, outboxNonRetryable...),
	})
	var res contract.BatchResult
	err := workflow.ExecuteActivity(actx, contract.PublishOutboxBatchName,
		contract.BatchParams{Source: p.Source, IDs: p.IDs}).Get(ctx, &res)
	if err == nil {
		return res, nil
	}
	hctx := workflow.WithActivityOptions(ctx, markDeadOptions)
	if herr := workflow.ExecuteActivity(hctx, contract.HandOutboxBatchName, contract.HandParams{
		Source: p.Source, IDs: p.IDs, LastError: "batch delivery gave up: " + rootMessage(err),
	}).Get(ctx, nil); herr != nil {
		return contract.BatchResult{}, herr
	}
	return contract.BatchResult{Handed: p.IDs}, nil
}
