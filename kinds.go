package courier

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// This file is the one table of the workflows courier starts (Kinds) and of every name they go
// by in Temporal: workflow types, workflow ids, task queues and search attributes. The starters
// (relay, tasks, timers), the workers' registrations (workflows.Register*), the visibility
// queries (the timer list, the console's counts, the bench) and the docs (docs/operations.md,
// "Workflow kinds") read it. TestNamesOnlyInTheTable fails if a workflow type or a task queue
// is spelled anywhere else in non-test code, TestKindsTableInTheDocs if the docs differ.
//
// A new kind of workflow: its row here (and in Kinds), its id function beside the others, its
// registration in workflows/register.go, its start through workflows.StartAttributes, and its
// row in docs/operations.md.

// Kind is one kind of workflow courier starts: the row of the table.
type Kind struct {
	// Name is the value of the CourierKind search attribute on its runs.
	Name string
	// Workflow is the workflow type it is registered and started under. Recorded histories and
	// running workflows hold it, so a type is never renamed and never leaves the table while
	// runs of it may be open; several kinds may share one (a timer that keeps no row, a
	// bucketed timer's run of its own and a schedule's run are all timer runs). A kind whose
	// runs change in a way old workers cannot run gets a new type, and its runs of the old one
	// keep their CourierKind (timer did, for row-timer: see KindRowlessTimer).
	Workflow string
	// ID is how its workflow ids read, as its id function writes them ("<…>" for a part, " or "
	// between alternatives).
	ID string
	// Queue names the task queue its runs go on beside the workflows' queue (the worker's
	// queue for courier's workflows, relay.Config.TaskQueue: DefaultWorkflowQueue unless
	// configured); nil: the workflows' queue itself (TaskQueue).
	Queue func(workflowQueue string) string
	// Attributes are the search attributes its runs start with (StartAttributes), CourierKind
	// first.
	Attributes []string
	// Updates are the search attributes its runs change as they go (upserted by the workflow).
	Updates []string
}

// The kinds of workflow courier starts.
var (
	// KindOutbox is an outbox record's delivery (OutboxWorkflowID). Its runs start without a
	// CourierState and write one only when they end other than sent (dead, or pending for a
	// paused topic): Completed without a state is a sent record.
	KindOutbox = Kind{Name: "outbox", Workflow: "outbox-delivery", ID: "outbox/<id> or outbox/<source>/<id>",
		Attributes: []string{SAKind, SATopic, SASource, SARecord}, Updates: []string{SAState}}
	// KindOutboxBatch is a batch of outbox records in batch mode (OutboxBatchWorkflowID);
	// CourierRecordID is the batch's first id.
	KindOutboxBatch = Kind{Name: "outbox-batch", Workflow: "outbox-batch", ID: "outbox-batch/<source>/<first id>-<last id>",
		Attributes: []string{SAKind, SASource, SARecord}}
	// KindOutboxKey is an ordered key's delivery in ordered mode (OutboxKeyWorkflowID): one run
	// per key at a time. A run that leaves its key blocked upserts the dead record's state, id
	// and topic before it fails.
	KindOutboxKey = Kind{Name: "outbox-key", Workflow: "outbox-ordered-key", ID: "outbox-key/<key> or outbox-key/<source>/<key>",
		Attributes: []string{SAKind, SASource}, Updates: []string{SAState, SARecord, SATopic}}
	// KindTimer is a timer of its own, the default mode (TimerWorkflowID): a run that follows
	// the timer's row in courier's database, which decides its cancel and reschedule
	// (docs/timers.md). Its runs armed before rows were kept (2026-11-29) are of
	// KindRowlessTimer's type and keep no row: they are rowless timers that carry this
	// CourierKind (the timers' list selects both by their workflow type).
	KindTimer = Kind{Name: "timer", Workflow: "row-timer", ID: "timer/<biz_type>/<biz_id>",
		Attributes: []string{SAKind, SABizType, SABizID, SAState, SAFireAt}, Updates: []string{SAState, SAFireAt}}
	// KindRowlessTimer is a timer of its own that keeps no row and lives in Temporal only: one
	// armed by a timer service built without courier's database (TimerWorkflowID), or the
	// redelivery of such a timer. Its run answers its cancel and reschedule itself (workflow
	// updates).
	KindRowlessTimer = Kind{Name: "rowless-timer", Workflow: "timer", ID: "timer/<biz_type>/<biz_id>",
		Attributes: []string{SAKind, SABizType, SABizID, SAState, SAFireAt}, Updates: []string{SAState, SAFireAt}}
	// KindTimerBucket is a bucketed business type's second of timers (TimerBucketWorkflowID).
	KindTimerBucket = Kind{Name: "timer-bucket", Workflow: "timer-bucket", ID: "timer-bucket/<biz_type>/<unix second>",
		Attributes: []string{SAKind, SABizType, SAFireAt}}
	// KindBucketedTimer is a bucketed timer's delivery in a run of its own, retried after its
	// bucket's attempt failed or redelivered: a timer run under the timer's id.
	KindBucketedTimer = Kind{Name: "bucketed-timer", Workflow: "timer", ID: "timer/<biz_type>/<biz_id>",
		Attributes: []string{SAKind, SABizType, SABizID, SAState, SAFireAt}, Updates: []string{SAState, SAFireAt}}
	// KindScheduleRun is a run of a cron schedule: a timer run that is due at once, under the
	// schedule's id (ScheduleID) with the nominal time Temporal appends.
	KindScheduleRun = Kind{Name: "schedule-run", Workflow: "timer", ID: "schedule/<id>-<nominal time>",
		Attributes: []string{SAKind, SABizType, SABizID}, Updates: []string{SAState, SAFireAt}}
	// KindTask is a task attempt (TaskWorkflowID): each attempt a new run under the version's id.
	// Its runs start without a CourierState and write one only when the attempt ends other than
	// in the task's success: Completed without a state is a success.
	KindTask = Kind{Name: "task", Workflow: "task", ID: "task/<task_id>/<version>", Queue: TaskPushQueue,
		Attributes: []string{SAKind, SATaskID, SATaskVersion, SATaskPriority, SATaskQueue}, Updates: []string{SAState}}
	// KindTaskBatch is a batch of task attempts, one run per claim of a queue in the batched
	// dispatch mode (TaskBatchWorkflowID): it pushes them and ends; their deadlines are kept in
	// the database.
	KindTaskBatch = Kind{Name: "task-batch", Workflow: "task-batch", ID: "task-batch/<queue>/<batch>", Queue: TaskPushQueue,
		Attributes: []string{SAKind, SATaskQueue}}
	// KindTaskSweeper is the task lifecycle's sweeper: one running (TaskSweeperID), sweeping
	// every interval.
	KindTaskSweeper = Kind{Name: "task-sweeper", Workflow: "task-sweeper", ID: TaskSweeperID,
		Attributes: []string{SAKind}}
)

// Kinds is the table: every kind of workflow courier starts.
var Kinds = []Kind{KindOutbox, KindOutboxBatch, KindOutboxKey, KindTimer, KindRowlessTimer, KindTimerBucket,
	KindBucketedTimer, KindScheduleRun, KindTask, KindTaskBatch, KindTaskSweeper}

// TaskQueue is the task queue k's runs go on beside the workflows' queue workflowQueue.
func (k Kind) TaskQueue(workflowQueue string) string {
	if k.Queue != nil {
		return k.Queue(workflowQueue)
	}
	return workflowQueue
}

// Query is the visibility filter of k's runs: CourierKind = '<name>'.
func (k Kind) Query() string { return fmt.Sprintf("%s = '%s'", SAKind, k.Name) }

// KindIn is the visibility filter of the runs of any of ks: CourierKind IN ('<name>', …).
func KindIn(ks ...Kind) string {
	names := make([]string, len(ks))
	for i, k := range ks {
		names[i] = "'" + k.Name + "'"
	}
	return fmt.Sprintf("%s IN (%s)", SAKind, strings.Join(names, ", "))
}

// The workflow ids, one function per scheme (the kinds' ID).

// OutboxWorkflowID is the deterministic workflow ID of a record's delivery: outbox/<id> for
// courier's own database, outbox/<source>/<id> for a producer's database.
func OutboxWorkflowID(source string, id int64) string {
	if source == "" || source == DefaultSource {
		return "outbox/" + strconv.FormatInt(id, 10)
	}
	return "outbox/" + source + "/" + strconv.FormatInt(id, 10)
}

// OutboxBatchWorkflowID is the workflow ID of a batch delivery (outbox batch mode):
// outbox-batch/<source>/<first id>-<last id>.
func OutboxBatchWorkflowID(source string, first, last int64) string {
	if source == "" {
		source = DefaultSource
	}
	return "outbox-batch/" + source + "/" + strconv.FormatInt(first, 10) + "-" + strconv.FormatInt(last, 10)
}

// OutboxKeyWorkflowID is the deterministic workflow ID of an ordered key's delivery:
// outbox-key/<key> for courier's own database, outbox-key/<source>/<key> for a producer's
// (the key escaped as EscapeID does). One run per key at a time.
func OutboxKeyWorkflowID(source, key string) string {
	if source == "" || source == DefaultSource {
		return "outbox-key/" + EscapeID(key)
	}
	return "outbox-key/" + source + "/" + EscapeID(key)
}

// TimerWorkflowID is a timer's deterministic workflow id: timer/<biz_type>/<biz_id>, the id
// escaped (EscapeID).
func TimerWorkflowID(bizType, bizID string) string { return "timer/" + bizType + "/" + EscapeID(bizID) }

// TimerBucketWorkflowID is the deterministic workflow id of a business type's bucket:
// timer-bucket/<biz_type>/<unix second>.
func TimerBucketWorkflowID(bizType string, bucket int64) string {
	return "timer-bucket/" + bizType + "/" + strconv.FormatInt(bucket, 10)
}

// ScheduleID is the Temporal schedule id of a courier schedule, and the workflow id prefix of
// its runs: schedule/<id>, the id escaped (EscapeID).
func ScheduleID(id string) string { return "schedule/" + EscapeID(id) }

// TaskWorkflowID is the deterministic workflow id of a task version's attempts:
// task/<task_id>/<version>, the id escaped (EscapeID).
func TaskWorkflowID(taskID string, version int64) string {
	return fmt.Sprintf("task/%s/%d", EscapeID(taskID), version)
}

// TaskBatchWorkflowID is the workflow id of a batch run of a queue in the batched dispatch
// mode: task-batch/<queue>/<batch>, the queue escaped (EscapeID), batch the claim's own id.
func TaskBatchWorkflowID(queue, batch string) string {
	return fmt.Sprintf("task-batch/%s/%s", EscapeID(queue), batch)
}

// TaskAttemptDeliveryID is the delivery id of one attempt's push, the same on every push of
// that attempt whichever mode sends it (a single push's webhook-id, a batched push item's
// delivery_id): task/<task_id>/<version>/<attempt>.
func TaskAttemptDeliveryID(taskID string, version int64, attempt int) string {
	return fmt.Sprintf("%s/%d", TaskWorkflowID(taskID, version), attempt)
}

// TaskSweeperID is the workflow id of the task sweeper (and of the Temporal Schedule that ran
// it before it looped in one workflow).
const TaskSweeperID = "courier-task-sweeper"

// The task queues.

// DefaultWorkflowQueue is the Temporal task queue courier's workflows run on unless configured
// otherwise (relay.Config.TaskQueue); the task activities' queues are named beside it.
const DefaultWorkflowQueue = "courier-outbox"

// TaskPushQueue is the Temporal task queue of the task attempts' runs and their pushes beside
// the workflows' queue workflowQueue: courier-task-push beside the default courier-outbox,
// <queue>-task-push beside any other. Pushes wait on workers' endpoints for up to their push
// timeout, so they get their own queue and slots: a push endpoint that never answers holds push
// slots only. The runs are there too, so the worker that runs an attempt's first workflow task
// takes its push at once.
func TaskPushQueue(workflowQueue string) string { return queueBeside(workflowQueue, "-task-push") }

// TaskFinishQueue is the Temporal task queue of the task sweeps beside the workflows' queue
// workflowQueue: courier-task-finish beside the default courier-outbox, <queue>-task-finish
// beside any other.
func TaskFinishQueue(workflowQueue string) string { return queueBeside(workflowQueue, "-task-finish") }

func queueBeside(workflowQueue, suffix string) string {
	if workflowQueue == DefaultWorkflowQueue || workflowQueue == "" {
		return "courier" + suffix
	}
	return workflowQueue + suffix
}

// BizTypeTaskQueue is the task queue a business type's deliveries run on (activities, each
// type on its own so one slow business never delays another).
func BizTypeTaskQueue(name string) string { return "courier-biz-" + name }

// The search attributes.

// SearchAttributeType mirrors Temporal's indexed value types that courier uses, without
// importing the Temporal API here.
type SearchAttributeType string

// The types courier's search attributes use.
const (
	SAKeyword  SearchAttributeType = "Keyword"
	SAInt      SearchAttributeType = "Int"
	SADatetime SearchAttributeType = "Datetime"
)

// Search attribute names courier sets on its workflows, so operators can find work by its
// business key in the Temporal UI.
const (
	SAKind    = "CourierKind"     // the kind's Name
	SATopic   = "CourierTopic"    // outbox topic
	SASource  = "CourierSource"   // outbox source database
	SARecord  = "CourierRecordID" // outbox record id (in its source)
	SABizType = "CourierBizType"  // timer business type
	SABizID   = "CourierBizID"    // timer business id
	SAState   = "CourierState"    // outbox record status (dead, pending), timer state (scheduled, firing, delivered, failed, cancelled) or task status other than success; none: see the kind
	SAFireAt  = "CourierFireAt"   // timer fire time

	SATaskID       = "CourierTaskID"       // task id
	SATaskVersion  = "CourierTaskVersion"  // task version
	SATaskPriority = "CourierTaskPriority" // task priority 1..5
	SATaskQueue    = "CourierTaskQueue"    // task queue
)

// SearchAttributes lists every custom search attribute courier registers on start.
var SearchAttributes = map[string]SearchAttributeType{
	SAKind:    SAKeyword,
	SATopic:   SAKeyword,
	SASource:  SAKeyword,
	SARecord:  SAInt,
	SABizType: SAKeyword,
	SABizID:   SAKeyword,
	SAState:   SAKeyword,
	SAFireAt:  SADatetime,

	SATaskID:       SAKeyword,
	SATaskVersion:  SAInt,
	SATaskPriority: SAInt,
	SATaskQueue:    SAKeyword,
}

// RunAttributes are what a run's search attributes say of its work when it starts; a kind
// takes the ones its row lists (Kind.Attributes) and leaves the others.
type RunAttributes struct {
	Topic        string    // CourierTopic
	Source       string    // CourierSource
	RecordID     int64     // CourierRecordID
	BizType      string    // CourierBizType
	BizID        string    // CourierBizID
	FireAt       time.Time // CourierFireAt
	TaskID       string    // CourierTaskID
	TaskVersion  int64     // CourierTaskVersion
	TaskPriority int       // CourierTaskPriority
	TaskQueue    string    // CourierTaskQueue
	State        string    // CourierState
}

// StartAttributes are the search attributes a run of k starts with, by name: CourierKind and
// the values v gives for the others of k.Attributes; a Keyword's value is a string, an Int's
// an int64 and a Datetime's a time.Time (workflows.StartAttributes types them for the SDK).
func (k Kind) StartAttributes(v RunAttributes) map[string]any {
	out := make(map[string]any, len(k.Attributes))
	for _, name := range k.Attributes {
		switch name {
		case SAKind:
			out[name] = k.Name
		case SATopic:
			out[name] = v.Topic
		case SASource:
			out[name] = v.Source
		case SARecord:
			out[name] = v.RecordID
		case SABizType:
			out[name] = v.BizType
		case SABizID:
			out[name] = v.BizID
		case SAFireAt:
			out[name] = v.FireAt
		case SATaskID:
			out[name] = v.TaskID
		case SATaskVersion:
			out[name] = v.TaskVersion
		case SATaskPriority:
			out[name] = int64(v.TaskPriority)
		case SATaskQueue:
			out[name] = v.TaskQueue
		case SAState:
			out[name] = v.State
		default:
			panic("courier: kind " + k.Name + " lists the unknown search attribute " + name) // TestKinds
		}
	}
	return out
}
