package worker

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/activities"
	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/tasks"
	"github.com/courier-oss/courier/workflows"
)

// TaskStore is what tasks need from courier's database.
type TaskStore interface {
	activities.TaskStore
	tasks.ClaimStore
}

// newTaskWorkers builds the workers of the task queues beside the workflows' queue
// workflowQueue, whose worker is wf, and registers tasks on the three: the attempts' runs,
// their pushes and their finishes (local activities of the runs) on the push queue, with the
// push slots; the sweeps on the finish queue, with theirs; the sweeper's workflow on wf, where
// its schedule starts it. A push endpoint that accepts and never answers then holds push slots
// only: outbox deliveries, finishes (which release the queues' slots) and sweeps never wait
// behind it. The attempts' runs are on the push queue, so a push-and-wait is handed to the
// worker with the workflow task that schedules it; workflow tasks and local activities have
// slots of their own, and the local pushes get the push slots' bound.
func newTaskWorkers(tc client.Client, wf sdkworker.Registry, workflowQueue string, cfg Config, onFatal func(error), deps activities.TasksDeps) []sdkworker.Worker {
	deps.LocalPushSlots = cfg.Tasks.PushSlots
	acts := activities.NewTasks(deps)
	pushOpts := pushWorkerOptions(cfg)
	pushOpts.OnFatalError = onFatal
	push := sdkworker.New(tc, courier.KindTask.TaskQueue(workflowQueue), pushOpts) // the attempts' runs and their pushes
	finish := sdkworker.New(tc, courier.TaskFinishQueue(workflowQueue), sdkworker.Options{
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		MaxConcurrentActivityExecutionSize: cfg.Tasks.FinishSlots,
		MaxConcurrentActivityTaskPollers:   4,
		DisableWorkflowWorker:              true,
		OnFatalError:                       onFatal,
	})
	workflows.RegisterTasks(push, wf)
	push.RegisterActivityWithOptions(acts.SendPush, activity.RegisterOptions{Name: contract.SendPushName})
	push.RegisterActivityWithOptions(acts.PushAwait, activity.RegisterOptions{Name: contract.PushAwaitName})
	push.RegisterActivityWithOptions(acts.Finish, activity.RegisterOptions{Name: contract.FinishTaskName})
	push.RegisterActivityWithOptions(acts.PushBatch, activity.RegisterOptions{Name: contract.PushBatchName})
	finish.RegisterActivityWithOptions(acts.Sweep, activity.RegisterOptions{Name: contract.SweepTasksName})
	return []sdkworker.Worker{push, finish}
}

// pushWorkerOptions are those of the worker on the task push queue, where the attempts' runs
// are too.
func pushWorkerOptions(cfg Config) sdkworker.Options {
	return sdkworker.Options{
		WorkerStopTimeout:                  cfg.ShutdownTimeout,
		MaxConcurrentActivityExecutionSize: cfg.Tasks.PushSlots,
		MaxConcurrentActivityTaskPollers:   4,
		MaxConcurrentWorkflowTaskPollers:   8,
		StickyScheduleToStartTimeout:       StickyScheduleToStart,
	}
}
