package contract

import (
	"time"

	"github.com/courier-oss/courier"
)

// Registered names of the timer activities.
const (
	LoadBizTypeName  = "timer-load-biz-type"
	DeliverTimerName = "timer-deliver"
	// RecordTimerResultName writes how a bucketed timer's own run ended into its row.
	RecordTimerResultName = "timer-record-result"
	// NotifyTimerFailureName sends the signed timer.failed event to the type's failure
	// targets (URL and/or topic).
	NotifyTimerFailureName = "timer-notify-failure"
)

// Error types of the timer activities. The first two are non-retryable.
const (
	ErrTypeUnknownBizType    = "UnknownBizType"
	ErrTypePermanentDelivery = "PermanentDelivery"
	// ErrTypeRetryableDelivery marks a delivery the receiver refused for now (429, 5xx): retried
	// by the timer's policy, after the receiver's Retry-After when it sent one.
	ErrTypeRetryableDelivery = "RetryableDelivery"
)

// BizTypeDelivery is how a business type's timers are delivered, read at fire time.
type BizTypeDelivery struct {
	TaskQueue       string // the type's own queue: one slow type never delays another
	InitialInterval time.Duration
	Backoff         float64
	MaxInterval     time.Duration
	MaxAttempts     int32
	RequestTimeout  time.Duration // one attempt's bound
	// NotifyFailure says the type has a failure target: a timer that fails for good sends it
	// an event (NotifyTimerFailureName).
	NotifyFailure bool
}

// Retry is the type's delivery budget (the workflow fills its unset fields).
func (d BizTypeDelivery) Retry() courier.RetryPolicy {
	return courier.RetryPolicy{InitialInterval: d.InitialInterval, BackoffCoef: d.Backoff, MaxInterval: d.MaxInterval,
		MaxAttempts: int(d.MaxAttempts)}
}

// RecordTimerResultParams end a bucketed timer's row: delivered or failed, after Attempts.
type RecordTimerResultParams struct {
	BizType   string
	BizID     string
	State     courier.TimerState
	Attempts  int
	LastError string
}

// NotifyTimerFailureParams describe a timer that failed for good.
type NotifyTimerFailureParams struct {
	BizType    string
	BizID      string
	FireAt     time.Time
	Attempts   int
	LastError  string
	DeliveryID string
}

// DeliverTimerParams is the delivery activity's input.
type DeliverTimerParams struct {
	BizType    string
	BizID      string
	DeliveryID string // the same for every attempt: receivers deduplicate on it
	FireAt     time.Time
	Payload    []byte
}

// DeliveryAttempt is the detail of a failed delivery attempt's error: its number, so a timer
// that fails for good reports how many attempts it made.
type DeliveryAttempt struct {
	Attempt int
}
