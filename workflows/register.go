package workflows

import "go.temporal.io/sdk/workflow"

// WorkflowRegistrar is what can take workflow registrations: a worker or a replayer.
type WorkflowRegistrar interface {
	RegisterWorkflowWithOptions(w any, options workflow.RegisterOptions)
}

// Register registers every courier workflow under its stable name. Workers and the replay
// tests share this one list, so a replayed history always meets the code that runs.
func Register(r WorkflowRegistrar) {
	r.RegisterWorkflowWithOptions(OutboxDelivery, workflow.RegisterOptions{Name: OutboxDeliveryName})
	r.RegisterWorkflowWithOptions(OutboxBatch, workflow.RegisterOptions{Name: OutboxBatchName})
	r.RegisterWorkflowWithOptions(Timer, workflow.RegisterOptions{Name: TimerName})
	r.RegisterWorkflowWithOptions(Task, workflow.RegisterOptions{Name: TaskName})
	r.RegisterWorkflowWithOptions(TaskSweeper, workflow.RegisterOptions{Name: TaskSweeperName})
}
