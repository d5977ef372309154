package contract

import "time"

// Registered names of the timer activities.
const (
	LoadBizTypeName  = "timer-load-biz-type"
	DeliverTimerName = "timer-deliver"
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
}

// DeliverTimerParams is the delivery activity's input.
type DeliverTimerParams struct {
	BizType    string
	BizID      string
	DeliveryID string // the same for every attempt: receivers deduplicate on it
	FireAt     time.Time
	Payload    []byte
}
