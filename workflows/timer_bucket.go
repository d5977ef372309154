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

// timerBucketReserveChange guards what buckets recorded before it did not do. Version 1:
// reserve each batch's timers on the workflows' queue before the delivery is scheduled on the
// business type's queue, so timers held there (a paused type) read firing, like a timer of its
// own's. Version 2: a reserve that holds nothing schedules no delivery but waits for the next
// timer's fire time and reserves again; in version 1 a bucket woken at the start of its second,
// before its timers' fire times, scheduled its first delivery with nothing reserved, and a pause
// holding that delivery left every timer of the second scheduled.
const (
	timerBucketReserveChange = "timer-bucket-reserve"
	timerBucketReserves      = 1
	timerBucketReserveWaits  = 2
)

// deliverBatchOptions deliver a batch until it is done: a batch that fails on the way (a
// database hiccup, a worker that died) is run again with the same claim, so it delivers the
// same timers and nothing is stranded. The heartbeat shows a worker that died within 30 s.
var deliverBatchOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Minute,
	HeartbeatTimeout:    30 * time.Second,
	RetryPolicy:         TemporalRetry(untilDone, contract.ErrTypeUnknownBizType),
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
		batch := contract.DeliverTimerBatchParams{BizType: p.BizType, Bucket: p.Bucket, Limit: TimerBucketBatch,
			Claim: fmt.Sprintf("%s/%d", info.WorkflowExecution.RunID, res.Batches+1)}
		if v := workflow.GetVersion(ctx, timerBucketReserveChange, workflow.DefaultVersion, timerBucketReserveWaits); v >= timerBucketReserves {
			// The due timers become firing here, on the workflows' queue: the delivery below
			// takes exactly these (the same claim) and counts their attempt, however long the
			// type's queue holds it.
			reserve := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, timerRowOptions),
				contract.ReserveTimerBatchName, batch)
			if v < timerBucketReserveWaits {
				if err := reserve.Get(ctx, nil); err != nil { // its count, unread
					return res, err
				}
			} else {
				var r contract.ReserveTimerBatchResult
				if err := reserve.Get(ctx, &r); err != nil {
					return res, err
				}
				if r.Reserved == 0 {
					// None due yet by the database's clock: wait for the next, on this queue.
					if r.NextDue.IsZero() {
						return res, nil
					}
					if err := workflow.Sleep(ctx, max(r.NextDue.Sub(workflow.Now(ctx)), timerBucketSkewWait)); err != nil {
						return res, err
					}
					continue
				}
			}
		}
		res.Batches++
		var out contract.DeliverTimerBatchResult
		err := workflow.ExecuteActivity(workflow.WithTaskQueue(actx, courier.BizTypeTaskQueue(p.BizType)), contract.DeliverTimerBatchName,
			batch).Get(ctx, &out)
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
