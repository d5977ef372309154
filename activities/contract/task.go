package contract

import (
	"encoding/json"
	"time"

	"github.com/courier-oss/courier"
)

// Registered names of the task activities.
const (
	// SendPushName pushes one attempt without a heartbeat timeout to its worker, as a local
	// activity of the attempt's run, and ends when the worker has answered; the run then waits
	// for the result itself.
	SendPushName = "task-send-push"
	// PushAwaitName is the one activity of an attempt with a heartbeat timeout: it pushes to the
	// worker, trying again within the attempt while tries fail on the way, heartbeats while it
	// pushes, and then stays open until the gateway completes it by its id
	// (courier.TaskAttemptActivityID) with an AttemptResult. It carries the processing deadline
	// and the heartbeat timeout, which the worker's heartbeats extend.
	PushAwaitName = "task-push-await"
	// FinishTaskName records an attempt's outcome and releases its slot.
	FinishTaskName = "task-finish"
	// SweepTasksName runs one sweep of the task lifecycle.
	SweepTasksName = "task-sweep"
)

// ErrTypeTaskStale marks an attempt whose task has moved on (cancelled, or already finished by
// an earlier run): the workflow ends without touching the row.
const ErrTypeTaskStale = "TaskStale"

// ErrTypePushFailed marks a push the worker did not accept and that trying again cannot help
// (a 4xx answer, a refused address, no push_url): never retried within the attempt.
const ErrTypePushFailed = "PushFailed"

// ErrTypePushUnanswered marks a try of a push that failed on the way (no connection, no answer
// within the push timeout, 429 or 5xx): tried again within the attempt by the push's retry
// policy, after the worker's Retry-After when it sent one.
const ErrTypePushUnanswered = "PushUnanswered"

// The waits between the tries of one push that failed on the way, unless the worker's
// Retry-After asks for another: PushRetryInitial after the first, doubling, at most
// PushRetryMax (courier.PushTries tries in all).
const (
	PushRetryInitial = time.Second
	PushRetryMax     = 30 * time.Second
)

// PushBackoff is the wait after the given try (1 for the first) of a push that failed on the
// way, when the worker sent no Retry-After.
func PushBackoff(try int) time.Duration {
	d := PushRetryInitial
	for i := 1; i < try && d < PushRetryMax; i++ {
		d *= 2
	}
	return min(d, PushRetryMax)
}

// PushingDetail is the heartbeat detail PushAwaitName records while it pushes: an attempt
// that times out with it as its last heartbeat timed out before the worker accepted the push.
// A worker's own heartbeat details replace it.
type PushingDetail struct {
	CourierPushing bool `json:"courier_pushing"`
}

// PushTaskParams names one attempt; the payload stays in the database. The timeouts are the
// ones Temporal enforces on this attempt (fixed at the claim), so the push tells the worker
// exactly those.
type PushTaskParams struct {
	TaskID            string
	Version           int64 // the task version
	Attempt           int
	ProcessingTimeout time.Duration
	// HeartbeatTimeout is the attempt's (0: none); the push records it in the row, so the
	// gateway knows how the run takes the worker's result (AttemptResult).
	HeartbeatTimeout time.Duration
	// Deadline is when the processing timeout runs out, fixed by the workflow before the first
	// try so every try tells the worker the same.
	Deadline time.Time
	// PushTimeout bounds one try's HTTP request; zero: courier.DefaultPushTimeout.
	PushTimeout time.Duration
}

// SendPushResult is an accepted push.
type SendPushResult struct {
	Try int32 // the try the worker accepted (1 unless earlier ones failed on the way)
}

// AttemptOutcome is how one attempt ended, the one type from the worker's report (api.TaskResult)
// through the workflow to the store. Workflow histories hold it as JSON with these Go field
// names and tags, so neither ever changes (TestAttemptOutcomeJSON).
type AttemptOutcome struct {
	Kind       courier.OutcomeKind
	StatusCode int
	Message    string
	Result     json.RawMessage
	// Trace is the trace context of the gateway's span of the worker's result call (zero for an
	// outcome courier decided): the finish links its span to it (docs/tracing.md).
	Trace courier.TraceContext `json:",omitzero"`
	// Recorded says the gateway wrote this outcome into the task's row before it handed it to
	// the attempt's run, so the run has nothing left to record and ends as the row says.
	Recorded bool `json:",omitempty"`
}

// AttemptResult is a worker's result of one attempt as the gateway hands it to the attempt's
// run: what PushAwaitName is completed with (an attempt with a heartbeat timeout), or the
// argument of the run's task-result update (one without).
type AttemptResult struct {
	Attempt int
	Outcome AttemptOutcome
	// Status is the task's status as the gateway's write left it, for an outcome it recorded
	// in the row (Outcome.Recorded).
	Status courier.TaskStatus `json:",omitempty"`
}

// FinishTaskParams ends one attempt.
type FinishTaskParams struct {
	TaskID  string
	Version int64
	Attempt int
	Outcome AttemptOutcome
}

// FinishTaskResult is what finishing did.
type FinishTaskResult struct {
	// Applied: the row holds this outcome (written by this finish, or the same success
	// recorded first by the gateway); false if the task had moved on.
	Applied       bool
	Status        courier.TaskStatus
	NextAttemptAt time.Time
}

// SweepParams bound one sweep.
type SweepParams struct {
	BatchSize  int // rows per statement; default 500
	MaxBatches int // statements per step and queue; default 20
	// Every makes the sweeper workflow sweep again after this long, continuing as new now and
	// then, instead of sweeping once; 0 in the runs a schedule started before it existed.
	Every time.Duration `json:",omitempty"`
}

// SweepResult counts what one sweep changed.
type SweepResult struct {
	Expired        int64 // pending past their pending timeout → failed
	Stopped        int64 // successes past retention → stopped
	Purged         int64 // finished rows past the purge age → deleted
	Orphaned       int   // attempts in Processing whose workflow had ended → finished as timed out
	LimiterRepairs int   // queues whose in_flight did not match their rows
}
