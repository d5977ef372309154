package worker

import (
	"go.temporal.io/sdk/activity"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// registerOutbox registers the outbox on the workflows' worker: the delivery, batch and ordered
// key workflows and their activities (publish, mark dead, publish a batch, hand a batch over,
// claim and publish a key's next records, block a key).
func registerOutbox(r sdkworker.Registry, acts *activities.Outbox) {
	workflows.RegisterOutbox(r)
	r.RegisterActivityWithOptions(acts.Deliver, activity.RegisterOptions{Name: contract.DeliverOutboxName})
	r.RegisterActivityWithOptions(acts.MarkDead, activity.RegisterOptions{Name: contract.MarkOutboxDeadName})
	r.RegisterActivityWithOptions(acts.PublishBatch, activity.RegisterOptions{Name: contract.PublishOutboxBatchName})
	r.RegisterActivityWithOptions(acts.HandBatch, activity.RegisterOptions{Name: contract.HandOutboxBatchName})
	r.RegisterActivityWithOptions(acts.ClaimOrdered, activity.RegisterOptions{Name: contract.ClaimOrderedName})
	r.RegisterActivityWithOptions(acts.PublishOrdered, activity.RegisterOptions{Name: contract.PublishOrderedName})
	r.RegisterActivityWithOptions(acts.BlockOrdered, activity.RegisterOptions{Name: contract.BlockOrderedName})
}
