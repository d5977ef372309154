package contract

import "time"

// DeliverTimerBatchName claims the due timers of a business type's bucket (bucketed mode) and
// delivers them at once: MQ publishes in a batch, HTTP callbacks concurrently within the type's
// rate limit. It runs on the type's own task queue.
const DeliverTimerBatchName = "timer-deliver-batch"

// DeliverTimerBatchParams is one batch of a bucket: Claim names it, so a retry of the activity
// delivers the same timers again (receivers deduplicate by delivery id) and no others.
type DeliverTimerBatchParams struct {
	BizType string
	Bucket  int64 // the Unix second; timers of earlier buckets still due are taken too
	Claim   string
	Limit   int // timers at most
}

// DeliverTimerBatchResult says what one batch did and what is left.
type DeliverTimerBatchResult struct {
	Claimed    int // timers taken by this batch
	Delivered  int
	HandedOver int // failed ones, each handed to a timer run of its own with the rest of its budget
	// NextDue is the fire time of the bucket's earliest timer still scheduled (zero: none left).
	NextDue time.Time
}
