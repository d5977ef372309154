package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
)

// WorkflowRegistrar is what can take workflow registrations: a worker or a replayer.
type WorkflowRegistrar interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// RegisterOutbox registers the outbox's workflows under their stable names (courier.Kinds): the
// per-record delivery, the batch and the ordered key's delivery, all on the workflows' task
// queue.
func RegisterOutbox(r WorkflowRegistrar) {
	r.RegisterWorkflowWithOptions(OutboxDelivery, workflow.RegisterOptions{Name: courier.KindOutbox.Workflow})
	r.RegisterWorkflowWithOptions(OutboxBatch, workflow.RegisterOptions{Name: courier.KindOutboxBatch.Workflow})
	r.RegisterWorkflowWithOptions(OutboxOrdered, workflow.RegisterOptions{Name: courier.KindOutboxKey.Workflow})
}

// RegisterTasks registers the task workflows under their stable names: the attempts and the
// batches on the registrar of the push task queue (courier.TaskPushQueue), the sweeper on that
// of the workflows' queue, where its schedule starts it.
func RegisterTasks(attempts, sweeper WorkflowRegistrar) {
	attempts.RegisterWorkflowWithOptions(Task, workflow.RegisterOptions{Name: courier.KindTask.Workflow})
	attempts.RegisterWorkflowWithOptions(TaskBatch, workflow.RegisterOptions{Name: courier.KindTaskBatch.Workflow})
	sweeper.RegisterWorkflowWithOptions(TaskSweeper, workflow.RegisterOptions{Name: courier.KindTaskSweeper.Workflow})
}

// RegisterTimers registers the timer workflows (a timer of its own that keeps a row, one that
// lives in Temporal only) and the bucket workflow under their stable names, on the workflows'
// task queue.
func RegisterTimers(r WorkflowRegistrar) {
	r.RegisterWorkflowWithOptions(RowTimer, workflow.RegisterOptions{Name: courier.KindTimer.Workflow})
	// The type of every timer run without a row: KindRowlessTimer's, KindBucketedTimer's and
	// KindScheduleRun's.
	r.RegisterWorkflowWithOptions(Timer, workflow.RegisterOptions{Name: courier.KindRowlessTimer.Workflow})
	r.RegisterWorkflowWithOptions(TimerBucket, workflow.RegisterOptions{Name: courier.KindTimerBucket.Workflow})
}

// Register registers every courier workflow on one registrar: what a replayer needs. Workers
// register each component's workflows with its activities, on the task queues they run on, with
// the functions above, so a replayed history always meets the code that runs.
func Register(r WorkflowRegistrar) {
	RegisterOutbox(r)
	RegisterTasks(r, r)
	RegisterTimers(r)
}
