package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// batchPushMargin is what a batch's push may take beyond its requests' tries: the database
// statements around them.
const batchPushMargin = time.Minute

// TaskBatch (courier.KindTaskBatch: one run per claim of a queue in the batched mode, on the
// push task queue) pushes a claim's attempts from one run (docs/tasks.md, "Dispatch modes"): a local
// activity in the run's first workflow task marks them pushed and sends them
// (contract.PushBatchName), retried until the database answers, and the run ends. What follows
// each attempt needs no run: the gateway records the worker's result in the row and frees the
// slot, and the claimers time out, every second, the attempts whose deadline or heartbeat
// timeout has passed (timeout_at, by the database's clock). A repeat of the push after a crash
// pushes only what is still due, with the same delivery ids.
func TaskBatch(ctx workflow.Context, p contract.PushBatchParams) (contract.PushBatchResult, error) {
	try := p.PushTimeout
	if try <= 0 {
		try = courier.DefaultPushTimeout
	}
	opts := workflow.LocalActivityOptions{
		// One run of the activity sends every request of the batch, each with its tries: it
		// ends within those tries and the waits between them.
		StartToCloseTimeout:    time.Duration(courier.PushTries)*(try+contract.PushRetryMax) + batchPushMargin,
		ScheduleToCloseTimeout: 10 * 365 * 24 * time.Hour,
		RetryPolicy:            TemporalRetry(untilDone),
	}
	var r contract.PushBatchResult
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, opts), contract.PushBatchName, p).Get(ctx, &r)
	return r, err
}
