package courier

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
	SAKind    = "CourierKind"     // one of the Kind values below
	SATopic   = "CourierTopic"    // outbox topic
	SASource  = "CourierSource"   // outbox source database
	SARecord  = "CourierRecordID" // outbox record id (in its source)
	SABizType = "CourierBizType"  // timer business type
	SABizID   = "CourierBizID"    // timer business id
	SAState   = "CourierState"    // outbox record status (dispatched, dead), timer state (scheduled, firing, delivered, failed, cancelled) or task status
	SAFireAt  = "CourierFireAt"   // timer fire time

	SATaskID       = "CourierTaskID"       // task id
	SATaskVersion  = "CourierTaskVersion"  // task version
	SATaskPriority = "CourierTaskPriority" // task priority 1..5
	SATaskQueue    = "CourierTaskQueue"    // task queue
)

// The values of SAKind: what kind of work a workflow run is.
const (
	KindOutbox      = "outbox"       // an outbox record's delivery
	KindOutboxBatch = "outbox-batch" // a batch of outbox records (batch mode)
	KindOutboxKey   = "outbox-key"   // an ordered key's delivery (ordered mode)
	KindTimer       = "timer"        // a timer of its own (the default mode)
	KindTimerBucket = "timer-bucket" // a business type's second of bucketed timers
	// KindBucketedTimer is a bucketed timer's delivery in a run of its own: retried after its
	// bucket's attempt failed, or redelivered.
	KindBucketedTimer = "bucketed-timer"
	KindScheduleRun   = "schedule-run" // a run of a cron schedule
	KindTask          = "task"         // a task attempt
	KindTaskBatch     = "task-batch"   // a batch of task attempts (a queue's batched dispatch mode)
	KindTaskSweeper   = "task-sweeper" // the task lifecycle's sweeper (one running, a run an hour)
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
