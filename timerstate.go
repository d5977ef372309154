package courier

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
