package courier

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// TaskStatus is where a task version is in its life.
type TaskStatus string

// Task statuses. Pending and Processing are live; the others are final until the sweeper moves
// Success to Stopped and later deletes Failed, Stopped, Superseded and Cancelled rows.
const (
	TaskPending    TaskStatus = "pending"    // waiting for a slot (or for next_attempt_at after a failure)
	TaskProcessing TaskStatus = "processing" // pushed to a worker, holding one of the queue's slots
	TaskSuccess    TaskStatus = "success"    // the worker reported success; kept for the retention
	TaskFailed     TaskStatus = "failed"     // retries spent, or the pending timeout passed
	TaskStopped    TaskStatus = "stopped"    // a success past its retention
	TaskSuperseded TaskStatus = "superseded" // a newer version arrived while this one was pending
	TaskCancelled  TaskStatus = "cancelled"  // cancelled through the API
)

// TaskStatuses lists every status, for metrics and validation.
var TaskStatuses = []TaskStatus{TaskPending, TaskProcessing, TaskSuccess, TaskFailed, TaskStopped, TaskSuperseded, TaskCancelled}

// Limits on task requests (the priorities are in priority.go).
const (
	MaxTaskIDBytes   = MaxIDBytes
	DefaultQueueName = "default"
)

// TaskAttemptActivityID is the id of the activity in which an attempt with a heartbeat timeout
// waits for its result; the result and heartbeat callbacks address it, so a stale attempt can
// never reach a newer one.
func TaskAttemptActivityID(attempt int) string { return fmt.Sprintf("attempt-%d", attempt) }

// Queue is a task queue's configuration: where its tasks are pushed, how many may be in
// Processing at once, how bands share the slots, and the lifecycle timings. The store keeps it
// in its own shape (store/task_config.go); the API shows it as api.Queue.
type Queue struct {
	Name             string
	PushURL          string        // workers' endpoint; empty: tasks wait
	Secrets          []string      // push signing secrets (whsec_…), newest first
	AllowPrivate     bool          // pushes may reach private-network addresses
	ConcurrencyLimit int           // tasks in Processing at once; default 10
	Weights          BandWeights   // default DefaultBandWeights
	PendingTimeout   time.Duration // Pending longer → Failed; default 24 h
	// ProcessingTimeout bounds one attempt from its push to its result; default 10 min.
	ProcessingTimeout time.Duration
	// PushTimeout bounds one try of a push, until the worker answers it. A try that fails on the
	// way (no connection, no answer in time, 429 or 5xx) is tried again within the attempt, up
	// to PushTries tries, after the worker's Retry-After if it sent one, and never past the
	// processing deadline. Default 30 s, from 1 s to 10 min.
	PushTimeout time.Duration
	// HeartbeatTimeout, when set, fails an attempt whose worker has not called the heartbeat
	// endpoint for that long; default 0 (off).
	HeartbeatTimeout time.Duration
	Retry            RetryPolicy   // InitialInterval, BackoffCoef, MaxInterval and MaxAttempts; no AttemptTimeout
	SuccessRetention time.Duration // Success → Stopped after; default 24 h
	PurgeAge         time.Duration // finished rows deleted after; default 7 days
	InFlight         int           // slots in use (read only)
	CreatedAt        time.Time
	UpdatedAt        time.Time

	// Admission control (admission.go, docs/admission.md): inserts per second and their burst
	// on each gateway (0: unlimited), and the most Pending tasks the queue holds (0: unbounded).
	InsertRate  float64
	InsertBurst int
	MaxPending  int

	// Flow control by concurrency key (docs/flow-control.md). PerKeyLimit caps the tasks of
	// one key in Processing (0: no cap; unkeyed tasks are never capped). FairKeys makes the
	// keys take turns within a priority band, each slot going to the key with the fewest tasks
	// in Processing for its weight (KeyWeights, default 1); a PerKeyLimit or KeyWeights turns
	// it on too.
	PerKeyLimit int
	FairKeys    bool
	KeyWeights  map[string]int

	// DispatchRate caps the queue's claims (each claim leads to one push) per second across
	// every worker, held in a token bucket in the database (0: no cap); DispatchBurst is the
	// bucket's size (0: the rate rounded up, at least 1).
	DispatchRate  float64
	DispatchBurst int

	// DispatchMode is how the queue's attempts run: DispatchPerAttempt (one workflow run per
	// attempt, the default) or DispatchBatched (one run pushes a claim's attempts, their
	// deadlines kept in the database). PushBatchSize is how many attempts one push carries in
	// the batched mode (1: one per push; up to MaxPushBatchSize).
	DispatchMode  DispatchMode
	PushBatchSize int
}

// DispatchMode is how a queue's attempts run (docs/tasks.md, "Dispatch modes").
type DispatchMode string

// The dispatch modes.
const (
	// DispatchPerAttempt runs each attempt as its own workflow run (task/<id>/<version>): the
	// attempt is visible in the Temporal UI, at about 12 history events and 4 billable actions.
	DispatchPerAttempt DispatchMode = "per-attempt"
	// DispatchBatched pushes a claim's attempts from one workflow run (task-batch/…) and keeps
	// their deadlines and heartbeats in the database, checked every second: a fraction of an
	// event and an action per task, no run per attempt in the Temporal UI.
	DispatchBatched DispatchMode = "batched"
)

// MaxConcurrencyLimit bounds a queue's concurrency_limit.
const MaxConcurrencyLimit = 10000

// MaxPushBatchSize bounds a queue's push_batch_size.
const MaxPushBatchSize = 1000

// Batched reports whether the queue dispatches in the batched mode.
func (q Queue) Batched() bool { return q.DispatchMode == DispatchBatched }

// DispatchBucket is the size of the queue's dispatch token bucket: DispatchBurst, or the rate
// rounded up (at least 1) when it is unset.
func (q Queue) DispatchBucket() int {
	if q.DispatchBurst > 0 {
		return q.DispatchBurst
	}
	return max(1, int(math.Ceil(q.DispatchRate)))
}

// Keyed reports whether the queue claims by concurrency key (a per-key limit, fair keys or key
// weights); a queue that is not claims as if no task had a key.
func (q Queue) Keyed() bool { return q.PerKeyLimit > 0 || q.FairKeys || len(q.KeyWeights) > 0 }

// KeyWeight is a concurrency key's weight in its queue's turns: KeyWeights[key], default 1.
func (q Queue) KeyWeight(key string) int {
	if w := q.KeyWeights[key]; w > 0 {
		return w
	}
	return 1
}

// Bounds of the per-key settings.
const (
	MaxKeyWeights = 1000 // entries in a queue's key_weights
	MaxKeyWeight  = 1000
)

// checkKeys validates the per-key settings and the dispatch rate.
func (q Queue) checkKeys() error {
	switch {
	case q.PerKeyLimit < 0 || q.PerKeyLimit > q.ConcurrencyLimit:
		return badField("per_key_limit", "per_key_limit must be 0 (none) or from 1 to the concurrency_limit")
	case q.DispatchRate < 0 || q.DispatchRate > 100000 || math.IsNaN(q.DispatchRate):
		return badField("dispatch_rate_per_second", "dispatch_rate_per_second must be 0 (none) or up to 100000")
	case q.DispatchBurst < 0 || q.DispatchBurst > 100000:
		return badField("dispatch_burst", "dispatch_burst must be from 0 (the rate) to 100000")
	case len(q.KeyWeights) > MaxKeyWeights:
		return badField("key_weights", "key_weights holds at most %d keys", MaxKeyWeights)
	}
	for k, w := range q.KeyWeights {
		if err := CheckID("key_weights", k); err != nil {
			return err
		}
		if w < 1 || w > MaxKeyWeight {
			return badField("key_weights", "a key's weight must be from 1 to %d", MaxKeyWeight)
		}
	}
	return nil
}

// Bounds of a queue's push timeout, and the tries of one attempt's push.
const (
	DefaultPushTimeout = 30 * time.Second
	MaxPushTimeout     = 10 * time.Minute
	PushTries          = 3
)

// WithDefaults fills unset fields with their documented defaults.
func (q Queue) WithDefaults() Queue {
	if q.ConcurrencyLimit == 0 {
		q.ConcurrencyLimit = 10
	}
	if q.Weights == (BandWeights{}) {
		q.Weights = DefaultBandWeights
	}
	if q.PendingTimeout == 0 {
		q.PendingTimeout = 24 * time.Hour
	}
	if q.ProcessingTimeout == 0 {
		q.ProcessingTimeout = 10 * time.Minute
	}
	if q.PushTimeout == 0 {
		q.PushTimeout = DefaultPushTimeout
	}
	if q.Retry.MaxAttempts == 0 {
		q.Retry.MaxAttempts = 3
	}
	if q.Retry.InitialInterval == 0 {
		q.Retry.InitialInterval = 10 * time.Second
	}
	if q.Retry.BackoffCoef == 0 {
		q.Retry.BackoffCoef = 2
	}
	if q.Retry.MaxInterval == 0 {
		q.Retry.MaxInterval = 10 * time.Minute
	}
	if q.SuccessRetention == 0 {
		q.SuccessRetention = 24 * time.Hour
	}
	if q.PurgeAge == 0 {
		q.PurgeAge = 7 * 24 * time.Hour
	}
	if q.Secrets == nil {
		q.Secrets = []string{}
	}
	if q.DispatchMode == "" {
		q.DispatchMode = DispatchPerAttempt
	}
	if q.PushBatchSize == 0 {
		q.PushBatchSize = 1
	}
	return q
}

func badField(field, format string, args ...any) error {
	return &Error{Code: CodeValidation, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
}

// Validate returns a validation_failed error naming the first bad field.
func (q Queue) Validate() error {
	if err := CheckName("name", q.Name); err != nil {
		return err
	}
	switch {
	case q.ConcurrencyLimit < 1 || q.ConcurrencyLimit > MaxConcurrencyLimit:
		return badField("concurrency_limit", "concurrency_limit must be from 1 to %d", MaxConcurrencyLimit)
	case q.PendingTimeout < time.Second || q.PendingTimeout > 365*24*time.Hour:
		return badField("pending_timeout", "pending_timeout must be from 1s to 8760h")
	case q.ProcessingTimeout < time.Second || q.ProcessingTimeout > 7*24*time.Hour:
		return badField("processing_timeout", "processing_timeout must be from 1s to 168h")
	case q.PushTimeout < time.Second || q.PushTimeout > MaxPushTimeout:
		return badField("push_timeout", "push_timeout must be from 1s to 10m")
	case q.HeartbeatTimeout < 0 || q.HeartbeatTimeout > q.ProcessingTimeout || (q.HeartbeatTimeout > 0 && q.HeartbeatTimeout < time.Second):
		return badField("heartbeat_timeout", "heartbeat_timeout must be 0 (off) or from 1s to the processing_timeout")
	case q.Retry.MaxAttempts < 1 || q.Retry.MaxAttempts > 100:
		return badField("retry.max_attempts", "retry max_attempts must be from 1 to 100")
	case q.Retry.InitialInterval < time.Second || q.Retry.InitialInterval > 24*time.Hour:
		return badField("retry.initial_interval", "retry initial_interval must be from 1s to 24h")
	case q.Retry.BackoffCoef < 1 || q.Retry.BackoffCoef > 10:
		return badField("retry.backoff", "retry backoff must be from 1 to 10")
	case q.Retry.MaxInterval < q.Retry.InitialInterval || q.Retry.MaxInterval > 7*24*time.Hour:
		return badField("retry.max_interval", "retry max_interval must be at least the initial interval and at most 168h")
	case q.SuccessRetention < time.Minute:
		return badField("success_retention", "success_retention must be at least 1m")
	case q.PurgeAge < time.Minute:
		return badField("purge_age", "purge_age must be at least 1m")
	}
	if err := q.Weights.Validate(); err != nil {
		return err
	}
	if err := q.checkAdmission(); err != nil {
		return err
	}
	if err := q.checkKeys(); err != nil {
		return err
	}
	switch {
	case q.DispatchMode != DispatchPerAttempt && q.DispatchMode != DispatchBatched:
		return badField("dispatch_mode", `dispatch_mode must be "per-attempt" or "batched"`)
	case q.PushBatchSize < 1 || q.PushBatchSize > MaxPushBatchSize:
		return badField("push_batch_size", "push_batch_size must be from 1 to %d", MaxPushBatchSize)
	case q.PushBatchSize > 1 && !q.Batched():
		return badField("push_batch_size", `push_batch_size above 1 needs "dispatch_mode": "batched"`)
	}
	if q.PushURL != "" {
		if err := CheckCallbackURL("push_url", q.PushURL); err != nil {
			return err
		}
	}
	if len(q.Secrets) > 2 {
		return badField("secrets", "at most two signing secrets (during a rotation)")
	}
	for _, s := range q.Secrets {
		if err := CheckSigningSecret("secrets", s); err != nil {
			return err
		}
	}
	return nil
}

// TaskOverrides are per-task settings that replace the queue's. The store keeps them in its
// own shape (store/task_config.go); the API's is api.TaskOverrides.
type TaskOverrides struct {
	PendingTimeout    time.Duration
	ProcessingTimeout time.Duration
	HeartbeatTimeout  time.Duration
	MaxAttempts       int
}

// Apply returns q with the overrides in place.
func (o TaskOverrides) Apply(q Queue) Queue {
	if o.PendingTimeout > 0 {
		q.PendingTimeout = o.PendingTimeout
	}
	if o.ProcessingTimeout > 0 {
		q.ProcessingTimeout = o.ProcessingTimeout
	}
	if o.HeartbeatTimeout > 0 {
		q.HeartbeatTimeout = o.HeartbeatTimeout
	}
	if o.MaxAttempts > 0 {
		q.Retry.MaxAttempts = o.MaxAttempts
	}
	return q
}

// TaskRequest is one insert.
type TaskRequest struct {
	TaskID    string
	Version   int64
	Priority  int // 1 (high) … 5 (low); 0 means DefaultPriority
	Queue     string
	Payload   json.RawMessage
	Overrides TaskOverrides
	// ConcurrencyKey groups tasks for their queue's per-key limit and turns (a tenant, a
	// customer); "" for none. Printable UTF-8 of at most MaxIDBytes, like an id.
	ConcurrencyKey string
	// Trace is the inserting request's W3C trace context, kept with the task so its attempts
	// join that trace; zero for none. It is not part of the task's content: a repeat with
	// another trace is still the same request.
	Trace TraceContext
}

// Normalize fills defaults and validates; every failure is validation_failed with its field.
func (r *TaskRequest) Normalize() error {
	if r.Priority == 0 {
		r.Priority = DefaultPriority
	}
	if r.Queue == "" {
		r.Queue = DefaultQueueName
	}
	if len(r.Payload) == 0 {
		r.Payload = json.RawMessage("null")
	}
	if err := CheckID("task_id", r.TaskID); err != nil {
		return err
	}
	if err := CheckName("queue", r.Queue); err != nil {
		return err
	}
	switch {
	case r.Version < 1:
		return badField("task_version", "task_version must be an integer of at least 1")
	case r.Priority < 1 || r.Priority > MaxPriority:
		return badField("priority", "priority must be from 1 (high) to 5 (low)")
	case !json.Valid(r.Payload):
		return badField("payload", "payload must be JSON")
	case r.Overrides.PendingTimeout < 0 || r.Overrides.ProcessingTimeout < 0 || r.Overrides.HeartbeatTimeout < 0:
		return badField("overrides", "override timeouts must be positive durations")
	case r.Overrides.ProcessingTimeout != 0 && (r.Overrides.ProcessingTimeout < time.Second || r.Overrides.ProcessingTimeout > 7*24*time.Hour):
		return badField("overrides.processing_timeout", "processing_timeout must be from 1s to 168h")
	case r.Overrides.HeartbeatTimeout != 0 && (r.Overrides.HeartbeatTimeout < time.Second || r.Overrides.HeartbeatTimeout > 7*24*time.Hour):
		return badField("overrides.heartbeat_timeout", "heartbeat_timeout must be from 1s to 168h")
	case r.Overrides.PendingTimeout != 0 && (r.Overrides.PendingTimeout < time.Second || r.Overrides.PendingTimeout > 365*24*time.Hour):
		return badField("overrides.pending_timeout", "pending_timeout must be from 1s to 8760h")
	case r.Overrides.MaxAttempts < 0 || r.Overrides.MaxAttempts > 100:
		return badField("overrides.max_attempts", "max_attempts must be from 1 to 100")
	}
	if r.ConcurrencyKey != "" {
		return CheckID("concurrency_key", r.ConcurrencyKey)
	}
	return nil
}

// Task is one task version as stored.
type Task struct {
	TaskID   string
	Version  int64
	Queue    string
	Priority int
	Status   TaskStatus
	// ConcurrencyKey is the task's key for its queue's per-key limit and turns; "" for none.
	ConcurrencyKey string
	Payload        json.RawMessage
	Overrides      TaskOverrides
	Attempt        int // the current attempt's number; increases across replacements
	Attempts       int // attempts used since the task was last (re)submitted
	Result         json.RawMessage
	StatusCode     int
	Message        string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	NextAttemptAt  time.Time
	ExpiresAt      *time.Time // a pending task fails after this
	ClaimedAt      *time.Time
	PushedAt       *time.Time
	DeadlineAt     *time.Time // the current attempt's processing deadline, set by its push
	FinishedAt     *time.Time
	RunID          string // the current attempt's Temporal run, recorded by its push (empty before it); a cancel targets exactly this run
	// AttemptHeartbeatTimeout is the current attempt's heartbeat timeout, recorded with RunID by
	// its push (0: none): it says how the gateway hands the run a worker's result (completing
	// the attempt's activity by its id, or an update).
	AttemptHeartbeatTimeout time.Duration
	// Batch is the workflow id of the batch run that pushes the current attempt (a queue in the
	// batched mode; "" for an attempt with a run of its own): its deadline and heartbeats are
	// kept in the row, and its result has no run to be handed to.
	Batch string
	// Trace is the trace context of the request that inserted (or last replaced) this version.
	Trace TraceContext
}

// TaskFilter selects task versions for a list or a bulk action, newest first. Zero fields do
// not filter.
type TaskFilter struct {
	Queue          string
	Status         TaskStatus
	Statuses       []TaskStatus // any of these (a bulk action's statuses); with Status, both apply
	Priority       int          // 1 to MaxPriority
	ConcurrencyKey string       // the tasks of one concurrency key
	CreatedAfter   time.Time    // created at or after
	CreatedBefore  time.Time    // created before
	// Latest keeps only each task id's highest version (the one a re-submission or a retry may
	// replace; a lower one is stale).
	Latest bool
	Limit  int // versions per page; the store bounds it
	// After continues a list past the version it names (the last one of the previous page).
	After *TaskKey
}

// Bulk actions on tasks (POST /v1/tasks/bulk/cancel and /v1/tasks/bulk/retry): the statuses
// each applies to. A task in any other status is never matched.
var (
	TaskCancellable = []TaskStatus{TaskPending, TaskProcessing}
	TaskRetryable   = []TaskStatus{TaskFailed, TaskCancelled}
)

// TaskBulkResult says what a bulk action on tasks did.
type TaskBulkResult struct {
	Affected int  // tasks cancelled or retried
	Skipped  int  // matched, but changed meanwhile (finished, claimed, re-submitted, purged) and left as they were
	More     bool // matching tasks remain beyond the cap
}

// TaskKey names one task version in the order lists use: newest first.
type TaskKey struct {
	CreatedAt time.Time
	TaskID    string
	Version   int64
}

// Valid reports whether s is one of the known statuses.
func (s TaskStatus) Valid() bool {
	for _, v := range TaskStatuses {
		if s == v {
			return true
		}
	}
	return false
}

// TaskInsertOutcome says what an insert did.
type TaskInsertOutcome string

// Insert outcomes.
const (
	TaskCreated  TaskInsertOutcome = "created"  // a new task version (201)
	TaskReplaced TaskInsertOutcome = "replaced" // a pending, failed, stopped or cancelled one rewritten and pending again (200)
	TaskExisting TaskInsertOutcome = "existing" // processing or success: returned unchanged (200)
)

// OutcomeKind is how an attempt ended: the worker's report (success or failure) or courier's
// classification of a timeout or a cancel. The store decides the task's next status from it,
// and the workflow, the metrics and the API carry the same values.
type OutcomeKind string

// Attempt outcome kinds. Their values are in recorded workflow histories and in the API's
// result body ("status"): they never change.
const (
	OutcomeSuccess   OutcomeKind = "success"   // the worker reported success
	OutcomeFailure   OutcomeKind = "failure"   // the worker reported failure, or the push failed
	OutcomeTimeout   OutcomeKind = "timeout"   // no result within the processing or heartbeat timeout
	OutcomeCancelled OutcomeKind = "cancelled" // the attempt was cancelled
)

// Reportable says whether a worker may report this kind: only success and failure; timeouts
// and cancels are courier's to decide.
func (k OutcomeKind) Reportable() bool { return k == OutcomeSuccess || k == OutcomeFailure }
