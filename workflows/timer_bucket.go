package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities/contract"
)

// TimerBucketBatch is how many timers one delivery batch takes; a bucket of more runs more
// batches, one after another.
const TimerBucketBatch = 1000

// timerBucketBatchesPerRun bounds one run's history: past it the run continues as new and the
// next run takes the rest.
const timerBucketBatchesPerRun = 200

// timerBucketSkewWait is the least a bucket waits when its next timer is due by the engine's
// clock but not yet by the database's.
const timerBucketSkewWait = 100 * time.Millisecond

// TimerBucketParams names the bucket: a business type and a second.
type TimerBucketParams struct {
	BizType string
	Bucket  int64
}

// TimerBucketResult counts what the run delivered.
type TimerBucketResult struct {
	Batches    int
	Delivered  int
	HandedOver int
}

// deliverBatchOptions deliver a batch until it is done: a batch that fails on the way (a
// database hiccup, a worker that died) is run again with the same claim, so it delivers the
// same timers and nothing is stranded. The heartbeat shows a worker that died within 30 s.
var deliverBatchOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Minute,
	HeartbeatTimeout:    30 * time.Second,
	RetryPolicy:         untilDone.Temporal(contract.ErrTypeUnknownBizType),
}

// TimerBucket sleeps until its second begins, then delivers the business type's due timers in
// batches (each timer no earlier than its fire time, by the database's clock), sleeping until
// the next fire time in the bucket whenever none is due yet, until the bucket is empty. The
// timers are rows in courier's database: a cancel or reschedule changes the row, and the
// batch's claim takes only timers still scheduled and due, so an acknowledged cancel always
// wins and a rescheduled timer is left to its new bucket.
func TimerBucket(ctx workflow.Context, p TimerBucketParams) (TimerBucketResult, error) {
	var res TimerBucketResult
	if wait := time.Unix(p.Bucket, 0).Sub(workflow.Now(ctx)); wait > 0 {
		if err := workflow.Sleep(ctx, wait); err != nil {
			return res, err
		}
	}
	info := workflow.GetInfo(ctx)
	actx := workflow.WithActivityOptions(ctx, deliverBatchOptions)
	for {
		if res.Batches >= timerBucketBatchesPerRun {
			return res, workflow.NewContinueAsNewError(ctx, courier.KindTimerBucket.Workflow, p)
		}
		res.Batches++
		var out contract.DeliverTimerBatchResult
		err := workflow.ExecuteActivity(workflow.WithTaskQueue(actx, courier.BizTypeTaskQueue(p.BizType)), contract.DeliverTimerBatchName,
			contract.DeliverTimerBatchParams{BizType: p.BizType, Bucket: p.Bucket, Limit: TimerBucketBatch,
				Claim: fmt.Sprintf("%s/%d", info.WorkflowExecution.RunID, res.Batches)}).Get(ctx, &out)
		if err != nil {
			return res, err
		}
		res.Delivered += out.Delivered
		res.HandedOver += out.HandedOver
		switch {
		case out.Claimed >= TimerBucketBatch:
			// A full batch: more may be due already.
		case out.NextDue.IsZero():
			return res, nil
		default:
			// The next timer is not due yet by the database's clock. The engine's clock may be
			// a little ahead of it: a timer due by the engine but not yet by the database is
			// waited for briefly rather than asked for in a loop.
			wait := out.NextDue.Sub(workflow.Now(ctx))
			if out.Claimed == 0 {
				wait = max(wait, timerBucketSkewWait)
			}
			if wait > 0 {
				if err := workflow.Sleep(ctx, wait); err != nil {
					return res, err
				}
			}
		}
	}
}
