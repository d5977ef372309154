package api

import (
	"time"

	"github.com/courier-oss/courier"
)

// BizTypeConfig is the body of PUT /v1/biz-types/{name} (scope admin). A PUT replaces the
// whole configuration; omitted fields take their defaults, except Secrets: nil (left out) keeps
// the stored ones, and an http type without any gets a generated one, shown once in
// BizType.GeneratedSecret.
type BizTypeConfig struct {
	Delivery       string           `json:"delivery"`               // "http" (signed callback) or "mq" (publish to Topic)
	CallbackURL    string           `json:"callback_url,omitempty"` // http delivery
	Secrets        []string         `json:"secrets,omitzero"`       // whsec_… signing secrets, newest first
	Topic          string           `json:"topic,omitempty"`        // mq delivery
	RequestTimeout PositiveDuration `json:"request_timeout,omitzero"`
	Retry          Retry            `json:"retry,omitzero"`
	RateLimit      float64          `json:"rate_limit_per_second,omitempty"`  // deliveries per second across all workers; 0: unlimited
	AllowPrivate   bool             `json:"allow_private,omitempty"`          // callbacks may reach private networks
	InsertRate     float64          `json:"insert_rate_per_second,omitempty"` // timers created per second on each gateway; 0: unlimited
	InsertBurst    int              `json:"insert_burst,omitempty"`           // 0: the rate rounded up
	// TimerMode is how the type's timers are kept: "workflow" (the default: one workflow per
	// timer) or "bucketed" (rows in courier's database, delivered by one workflow per second).
	TimerMode      courier.TimerMode `json:"timer_mode,omitempty"`
	TimerRetention PositiveDuration  `json:"timer_retention,omitzero"` // bucketed rows kept once finished; default 168h
	FailureURL     string            `json:"failure_url,omitempty"`    // a signed event when a timer fails for good
	FailureTopic   string            `json:"failure_topic,omitempty"`  // the same event, published here
}

// Domain is the configuration as the store takes it, for the type called name.
func (c BizTypeConfig) Domain(name string) courier.BizType {
	return courier.BizType{Name: name, Delivery: c.Delivery, CallbackURL: c.CallbackURL, Secrets: c.Secrets,
		Topic: c.Topic, RequestTimeout: c.RequestTimeout.Std(), RetryInitial: c.Retry.InitialInterval.Std(),
		RetryBackoff: c.Retry.Backoff, RetryMax: c.Retry.MaxInterval.Std(), MaxAttempts: c.Retry.MaxAttempts,
		RateLimit: c.RateLimit, AllowPrivate: c.AllowPrivate, InsertRate: c.InsertRate, InsertBurst: c.InsertBurst,
		TimerMode: c.TimerMode, TimerRetention: c.TimerRetention.Std(), FailureURL: c.FailureURL, FailureTopic: c.FailureTopic}
}

// BizType is a business type as the API shows it; secrets are never shown, only counted.
type BizType struct {
	Name            string            `json:"name"`
	Delivery        string            `json:"delivery"`
	CallbackURL     string            `json:"callback_url,omitempty"`
	SecretsCount    int               `json:"secrets_count"`
	GeneratedSecret string            `json:"generated_secret,omitempty"` // only in the answer that generated it
	Topic           string            `json:"topic,omitempty"`
	TaskQueue       string            `json:"task_queue"` // the Temporal task queue its deliveries run on
	RequestTimeout  Duration          `json:"request_timeout"`
	Retry           Retry             `json:"retry"`
	RateLimit       float64           `json:"rate_limit_per_second"`
	AllowPrivate    bool              `json:"allow_private"`
	InsertRate      float64           `json:"insert_rate_per_second"`
	InsertBurst     int               `json:"insert_burst"`
	TimerMode       courier.TimerMode `json:"timer_mode"`
	TimerRetention  Duration          `json:"timer_retention"`
	FailureURL      string            `json:"failure_url,omitempty"`
	FailureTopic    string            `json:"failure_topic,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	Paused          *Pause            `json:"paused,omitempty"` // set while the type is paused

	// Created is set by the Go client: the PUT created the type (201) rather than replaced it.
	// It is never in the JSON.
	Created bool `json:"-"`
}

// BizTypeOf shows a stored business type.
func BizTypeOf(b courier.BizType) BizType {
	return BizType{
		Name: b.Name, Delivery: b.Delivery, CallbackURL: b.CallbackURL, SecretsCount: len(b.Secrets),
		Topic: b.Topic, TaskQueue: courier.BizTypeTaskQueue(b.Name), RequestTimeout: Duration(b.RequestTimeout),
		Retry: Retry{InitialInterval: PositiveDuration(b.RetryInitial), Backoff: b.RetryBackoff,
			MaxInterval: PositiveDuration(b.RetryMax), MaxAttempts: b.MaxAttempts},
		RateLimit: b.RateLimit, AllowPrivate: b.AllowPrivate, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		InsertRate: b.InsertRate, InsertBurst: b.InsertBurst, TimerMode: b.TimerMode, TimerRetention: Duration(b.TimerRetention),
		FailureURL: b.FailureURL, FailureTopic: b.FailureTopic,
	}
}
