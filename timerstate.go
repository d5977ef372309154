package courier

import "time"

// TimerState is where a timer is in its life. The timer workflow keeps it (its state query,
// its updates' answers, its result or failure details), writes it to the CourierState search
// attribute, and the API answers with it; the values are in recorded histories and in the API
// and never change.
type TimerState string

// Timer states. Scheduled is the only one a timer can leave by an update; the others are
// reached by the workflow itself.
const (
	TimerScheduled TimerState = "scheduled" // waiting for its fire time; may be rescheduled or cancelled
	TimerFiring    TimerState = "firing"    // its fire time has come: it is being delivered
	TimerDelivered TimerState = "delivered" // the delivery succeeded
	TimerFailed    TimerState = "failed"    // the delivery failed (budget spent, refused, unknown type)
	TimerCancelled TimerState = "cancelled" // cancelled before it fired
)

// TimerStates lists every state, for list filters and metrics.
var TimerStates = []TimerState{TimerScheduled, TimerFiring, TimerDelivered, TimerFailed, TimerCancelled}

// Valid says whether s is one of the TimerStates.
func (s TimerState) Valid() bool {
	switch s {
	case TimerScheduled, TimerFiring, TimerDelivered, TimerFailed, TimerCancelled:
		return true
	}
	return false
}

// TimerMode is how a business type keeps its timers.
type TimerMode string

// Timer modes.
const (
	// TimerModeWorkflow keeps each timer in a workflow of its own (timer/<biz_type>/<biz_id>):
	// the default, and the one to choose for timers that are rescheduled or inspected in the
	// Temporal UI.
	TimerModeWorkflow TimerMode = "workflow"
	// TimerModeBucketed keeps timers as rows in courier's database, delivered by one workflow
	// per business type and second (TimerBucketWorkflowID): for volume, at a fraction of the
	// engine's cost per timer.
	TimerModeBucketed TimerMode = "bucketed"
)

// Valid says whether m is a known mode.
func (m TimerMode) Valid() bool { return m == TimerModeWorkflow || m == TimerModeBucketed }

// TimerBucket is the bucket a bucketed timer firing at t falls in: the Unix second of t.
func TimerBucket(t time.Time) int64 { return t.Unix() }

// TimerRecord is a timer as courier's database keeps it: a bucketed timer, or the row that
// decides a timer of its own (Mode).
type TimerRecord struct {
	BizType     string
	BizID       string
	FireAt      time.Time
	State       TimerState
	Payload     []byte // JSON, delivered as it is
	RequestHash string // identifies the create request, so a repeat is recognised
	Version     int    // bumped by every reschedule
	Attempts    int    // delivery attempts made
	LastError   string
	DeliveryID  string // the same for every attempt of one firing; consumers deduplicate on it
	Trace       TraceContext
	CreatedAt   time.Time
	UpdatedAt   time.Time
	FinishedAt  *time.Time // delivered, failed or cancelled at

	// ScheduleID is set on a trigger of a schedule that rides the timer wheel: the timer is
	// that schedule's trigger for one fire time, and is delivered with the schedule's id as its
	// biz_id.
	ScheduleID string

	// Mode says who delivers the timer: its second's bucket (TimerModeBucketed, also when
	// empty) or a run of its own that follows the row (TimerModeWorkflow).
	Mode TimerMode
}

// TimerKey names one timer.
type TimerKey struct {
	BizType string
	BizID   string
}

// TimerInsert says what inserting one bucketed timer did.
type TimerInsert struct {
	Record TimerRecord // the stored timer: the new one, or the one already there
	// Created: the insert stored it. Otherwise a timer with the key was there already: with
	// the same request (RequestHash), a repeat; with another, Conflict.
	Created  bool
	Conflict bool
}

// TimerFilter selects timer rows (both modes) for a list, newest first. Zero fields do not filter.
type TimerFilter struct {
	BizType        string
	State          TimerState
	FinishedAfter  time.Time // finished (delivered, failed, cancelled) at or after
	FinishedBefore time.Time // finished before
	Limit          int       // timers per page; the store bounds it
	After          *TimerCursor
}

// TimerCursor continues a timer list after the timer it names (the last of the previous page).
type TimerCursor struct {
	CreatedAt time.Time
	BizType   string
	BizID     string
}

// TimerBucketRef names a business type's bucket of bucketed timers.
type TimerBucketRef struct {
	BizType string
	Bucket  int64 // the Unix second
}
