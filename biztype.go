package courier

import (
	"fmt"
	"time"
)

// Delivery kinds of a business type.
const (
	DeliveryHTTP = "http" // signed HTTP callback
	DeliveryMQ   = "mq"   // publish to a message-queue topic
)

// BizType is a business type's delivery configuration: how its timers and schedules are
// delivered, retried and rate-limited.
type BizType struct {
	Name           string
	Delivery       string        // http or mq
	CallbackURL    string        // http: where to POST
	Secrets        []string      // http: signing secrets, newest first (two during a rotation)
	Topic          string        // mq: topic to publish to
	RequestTimeout time.Duration // one attempt; default 10 s, at most 60 s
	RetryInitial   time.Duration // default 1 s
	RetryBackoff   float64       // default 2
	RetryMax       time.Duration // default 5 min
	MaxAttempts    int           // default 10
	RateLimit      float64       // deliveries per second across all workers; 0 = unlimited
	AllowPrivate   bool          // callbacks may reach private-network addresses
	InsertRate     float64       // timers created per second on each gateway; 0 = unlimited
	InsertBurst    int           // burst of InsertRate; 0 = the rate rounded up
	TimerMode      TimerMode     // how its timers are kept; default TimerModeWorkflow
	TimerRetention time.Duration // bucketed timers' rows are kept this long once finished; default 7 days
	// FailureURL and FailureTopic receive a signed event when one of the type's timers fails
	// for good (its retry budget spent, or refused); empty: no notification.
	FailureURL   string
	FailureTopic string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// DefaultTimerRetention is how long a bucketed timer's row is kept once it is finished.
const DefaultTimerRetention = 7 * 24 * time.Hour

// WithDefaults fills unset fields with their documented defaults.
func (b BizType) WithDefaults() BizType {
	if b.RequestTimeout == 0 {
		b.RequestTimeout = 10 * time.Second
	}
	if b.RetryInitial == 0 {
		b.RetryInitial = time.Second
	}
	if b.RetryBackoff == 0 {
		b.RetryBackoff = 2
	}
	if b.RetryMax == 0 {
		b.RetryMax = 5 * time.Minute
	}
	if b.MaxAttempts == 0 {
		b.MaxAttempts = 10
	}
	if b.TimerMode == "" {
		b.TimerMode = TimerModeWorkflow
	}
	if b.TimerRetention == 0 {
		b.TimerRetention = DefaultTimerRetention
	}
	return b
}

// Validate returns a validation_failed error naming the first bad field.
func (b BizType) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &Error{Code: CodeValidation, Message: fmt.Sprintf(format, args...), Details: map[string]any{"field": field}}
	}
	if err := CheckName("name", b.Name); err != nil {
		return err
	}
	switch {
	case b.Delivery != DeliveryHTTP && b.Delivery != DeliveryMQ:
		return bad("delivery", "delivery must be %q or %q", DeliveryHTTP, DeliveryMQ)
	case b.RequestTimeout < 100*time.Millisecond || b.RequestTimeout > time.Minute:
		return bad("request_timeout", "request_timeout must be from 100ms to 1m")
	case b.RetryInitial < 100*time.Millisecond || b.RetryInitial > time.Hour:
		return bad("retry.initial_interval", "retry initial interval must be from 100ms to 1h")
	case b.RetryBackoff < 1 || b.RetryBackoff > 10:
		return bad("retry.backoff", "retry backoff must be from 1 to 10")
	case b.RetryMax < b.RetryInitial || b.RetryMax > 24*time.Hour:
		return bad("retry.max_interval", "retry max interval must be at least the initial interval and at most 24h")
	case b.MaxAttempts < 1 || b.MaxAttempts > 1000:
		return bad("retry.max_attempts", "retry max attempts must be from 1 to 1000")
	case b.RateLimit < 0 || b.RateLimit > 10000:
		return bad("rate_limit_per_second", "rate limit must be from 0 (unlimited) to 10000 per second")
	case !b.TimerMode.Valid():
		return bad("timer_mode", "timer_mode must be %q or %q", TimerModeWorkflow, TimerModeBucketed)
	case b.TimerRetention < time.Minute || b.TimerRetention > 366*24*time.Hour:
		return bad("timer_retention", "timer_retention must be from 1m to 8784h")
	}
	if b.FailureURL != "" {
		if err := CheckCallbackURL("failure_url", b.FailureURL); err != nil {
			return err
		}
		if b.Delivery != DeliveryHTTP {
			return bad("failure_url", "failure_url is signed with the type's secrets, which only an http type has: use failure_topic")
		}
	}
	if b.FailureTopic != "" {
		if err := CheckTopic("failure_topic", b.FailureTopic); err != nil {
			return err
		}
	}
	if err := CheckRate("insert_rate_per_second", "insert_burst", b.InsertLimit()); err != nil {
		return err
	}
	if b.Delivery == DeliveryHTTP {
		if err := CheckCallbackURL("callback_url", b.CallbackURL); err != nil {
			return err
		}
		if len(b.Secrets) == 0 || len(b.Secrets) > 2 {
			return bad("secrets", "an http business type needs one or two signing secrets")
		}
		for _, s := range b.Secrets {
			if err := CheckSigningSecret("secrets", s); err != nil {
				return err
			}
		}
	}
	if b.Delivery == DeliveryMQ {
		return CheckTopic("topic", b.Topic)
	}
	return nil
}
