package api

import (
	"encoding/json"
	"time"

	"github.com/courier-oss/courier"
)

// TimerRequest is the body of POST /v1/timers (scope producer): arm a timer at a fire time or
// after a delay (When). The same request again (same fire time or delay, and payload) returns
// the timer the first one created, so a create is retried safely; a different request for the
// same biz_type and biz_id is a conflict.
type TimerRequest struct {
	BizType string `json:"biz_type"`
	BizID   string `json:"biz_id"`
	When
	Payload json.RawMessage `json:"payload,omitempty"` // sent with the callback or message; optional
}

// When says when a timer fires: at FireAt (RFC 3339), or Delay after the gateway takes the
// request ("30m"; "0s" fires at once). Exactly one is given; At and After build one.
type When struct {
	FireAt *time.Time `json:"fire_at,omitempty"`
	Delay  *Duration  `json:"delay,omitempty"`
}

// At is a When that fires at t.
func At(t time.Time) When { return When{FireAt: &t} }

// After is a When that fires d after the gateway takes the request.
func After(d time.Duration) When {
	v := Duration(d)
	return When{Delay: &v}
}

// Resolve returns when the timer fires, given the moment the request was taken, and the delay
// as given (nil for a fire time: a repeat of a delay request is recognised by its delay, not
// by the instant it resolved to). Giving both or neither is a validation error.
func (w When) Resolve(now time.Time) (fireAt time.Time, delay *time.Duration, err error) {
	hasAt := w.FireAt != nil && !w.FireAt.IsZero() // the zero time is no fire time
	switch {
	case hasAt && w.Delay != nil:
		return time.Time{}, nil, &courier.Error{Code: courier.CodeValidation, Message: "give fire_at or delay, not both",
			Details: map[string]any{"field": "fire_at"}}
	case w.Delay != nil:
		d := w.Delay.Std()
		return now.Add(d), &d, nil
	case hasAt:
		return *w.FireAt, nil, nil
	}
	return time.Time{}, nil, &courier.Error{Code: courier.CodeValidation, Message: "fire_at or delay is required",
		Details: map[string]any{"field": "fire_at"}}
}

// Reschedule is the body of PATCH /v1/timers/{biz_type}/{biz_id}: move a scheduled timer.
type Reschedule struct {
	When
}

// Timer is a timer as the API shows it.
type Timer struct {
	BizType   string             `json:"biz_type"`
	BizID     string             `json:"biz_id"`
	State     courier.TimerState `json:"state"` // scheduled, firing, delivered, failed, cancelled
	FireAt    time.Time          `json:"fire_at"`
	Attempts  int                `json:"attempts"`
	LastError string             `json:"last_error,omitempty"`
	Version   int                `json:"version"` // increases with every reschedule
	// WorkflowID is where to find the timer in the Temporal UI: its own workflow, or for a
	// bucketed timer its bucket's (timer-bucket/<biz_type>/<second>); a bucketed timer whose
	// delivery failed in its bucket is retried by a workflow of its own (timer/<biz_type>/<biz_id>).
	WorkflowID string            `json:"workflow_id"`
	Mode       courier.TimerMode `json:"mode,omitempty"` // workflow or bucketed
	Payload    json.RawMessage   `json:"payload,omitempty"`
	// Paused is set while the timer's business type is paused and the timer is still to be
	// delivered: it waits, and is delivered on resume (docs/flow-control.md).
	Paused *Pause `json:"paused,omitempty"`

	// Created is set by the Go client: this request armed the timer (201) rather than found it
	// armed. It is never in the JSON.
	Created bool `json:"-"`
}

// TimerPage is one page of timers; NextPageToken is empty on the last.
type TimerPage = List[Timer]

// TimerCallback is the body of a timer's delivery: the signed HTTP callback a business type's
// callback_url receives, or the message published to its topic.
type TimerCallback struct {
	DeliveryID string          `json:"delivery_id"` // the same for every attempt of one firing: deduplicate on it
	BizType    string          `json:"biz_type"`
	BizID      string          `json:"biz_id"`
	FireAt     time.Time       `json:"fire_at"`
	Attempt    int32           `json:"attempt"`
	Payload    json.RawMessage `json:"payload"`
}

// TimerFailedEvent is what a business type's failure_url (signed like a callback) or
// failure_topic receives when one of its timers fails for good: its retry budget spent, or
// refused by the receiver. Redeliver the timer once the cause is fixed.
type TimerFailedEvent struct {
	Event      string    `json:"event"` // "timer.failed"
	BizType    string    `json:"biz_type"`
	BizID      string    `json:"biz_id"`
	FireAt     time.Time `json:"fire_at"`
	Attempts   int       `json:"attempts"`
	LastError  string    `json:"last_error"`
	DeliveryID string    `json:"delivery_id"` // the failed delivery's id
}

// TimerFailedEventName is TimerFailedEvent.Event.
const TimerFailedEventName = "timer.failed"

// TimerBatch is the body of POST /v1/timers/batch: up to 1,000 timers, each created as POST
// /v1/timers would create it.
type TimerBatch struct {
	Timers []TimerRequest `json:"timers"`
}

// The outcomes of one timer of a batch.
const (
	BatchCreated  = "created"  // armed by this request (what POST /v1/timers answers 201)
	BatchExisting = "existing" // the same request had armed it before (200)
	BatchRefused  = "refused"  // refused; nothing of it was written
)

// TimerBatchItem is one timer's answer in a batch, in the request's order.
type TimerBatchItem struct {
	Index   int          `json:"index"`
	Status  int          `json:"status"`  // the HTTP status POST /v1/timers would have answered
	Outcome string       `json:"outcome"` // created, existing or refused
	Timer   *Timer       `json:"timer,omitempty"`
	Error   *ErrorDetail `json:"error,omitempty"` // a refused timer's error
}

// TimerBatchResult answers a batch: every timer's own outcome, and the counts.
type TimerBatchResult struct {
	Items    []TimerBatchItem `json:"items"`
	Created  int              `json:"created"`
	Existing int              `json:"existing"`
	Refused  int              `json:"refused"`
}

// TimerRedeliverFilter is the body of POST /v1/timers/redeliver (scope admin): which failed
// timers of a business type to deliver again.
type TimerRedeliverFilter struct {
	BizType      string     `json:"biz_type"`
	FailedAfter  *time.Time `json:"failed_after,omitempty"`  // failed at or after
	FailedBefore *time.Time `json:"failed_before,omitempty"` // failed before
	Max          *int       `json:"max,omitempty"`           // timers at most, 1 to 1,000; left out: 100
}

// TimerRedeliverResult says what a bulk redelivery did: Done timers delivered again, Skipped
// redelivered meanwhile by someone else.
type TimerRedeliverResult struct {
	BulkResult
}
