package store

import (
	"encoding/json"
	"time"

	"github.com/courier-oss/courier"
)

// The JSON shapes the task tables keep a queue's configuration (courier_task_queues.config) and
// a task's overrides (courier_tasks.overrides) in: durations in nanoseconds, field names fixed
// by the rows already written, so they never change (TestStoredConfigShapes). The domain types
// (courier.Queue, courier.TaskOverrides) carry no tags; the API's shapes are api.Queue and
// api.TaskOverrides.

// queueConfig is a queue's configuration as its row keeps it. The name, the limit's count and
// the times are columns of their own.
type queueConfig struct {
	PushURL           string               `json:"push_url"`
	Secrets           []string             `json:"secrets"`
	AllowPrivate      bool                 `json:"allow_private"`
	ConcurrencyLimit  int                  `json:"concurrency_limit"`
	Weights           courier.BandWeights  `json:"weights"`
	PendingTimeout    time.Duration        `json:"pending_timeout"`
	ProcessingTimeout time.Duration        `json:"processing_timeout"`
	PushTimeout       time.Duration        `json:"push_timeout"`
	HeartbeatTimeout  time.Duration        `json:"heartbeat_timeout"`
	Retry             retryConfig          `json:"retry"`
	SuccessRetention  time.Duration        `json:"success_retention"`
	PurgeAge          time.Duration        `json:"purge_age"`
	InsertRate        float64              `json:"insert_rate_per_second,omitempty"`
	InsertBurst       int                  `json:"insert_burst,omitempty"`
	MaxPending        int                  `json:"max_pending,omitempty"`
	PerKeyLimit       int                  `json:"per_key_limit,omitempty"`
	FairKeys          bool                 `json:"fair_keys,omitempty"`
	KeyWeights        map[string]int       `json:"key_weights,omitempty"`
	DispatchRate      float64              `json:"dispatch_rate_per_second,omitempty"`
	DispatchBurst     int                  `json:"dispatch_burst,omitempty"`
	DispatchMode      courier.DispatchMode `json:"dispatch_mode,omitempty"`
	PushBatchSize     int                  `json:"push_batch_size,omitempty"`
}

// retryConfig is a queue's retry policy as its row keeps it.
type retryConfig struct {
	MaxAttempts     int           `json:"max_attempts"`
	InitialInterval time.Duration `json:"initial_interval"`
	Backoff         float64       `json:"backoff"`
	MaxInterval     time.Duration `json:"max_interval"`
}

// encodeQueue is the config column of q's row.
func encodeQueue(q courier.Queue) ([]byte, error) {
	return json.Marshal(queueConfig{
		PushURL: q.PushURL, Secrets: q.Secrets, AllowPrivate: q.AllowPrivate, ConcurrencyLimit: q.ConcurrencyLimit,
		Weights: q.Weights, PendingTimeout: q.PendingTimeout, ProcessingTimeout: q.ProcessingTimeout,
		PushTimeout: q.PushTimeout, HeartbeatTimeout: q.HeartbeatTimeout,
		Retry: retryConfig{MaxAttempts: q.Retry.MaxAttempts, InitialInterval: q.Retry.InitialInterval,
			Backoff: q.Retry.BackoffCoef, MaxInterval: q.Retry.MaxInterval},
		SuccessRetention: q.SuccessRetention, PurgeAge: q.PurgeAge,
		InsertRate: q.InsertRate, InsertBurst: q.InsertBurst, MaxPending: q.MaxPending,
		PerKeyLimit: q.PerKeyLimit, FairKeys: q.FairKeys, KeyWeights: q.KeyWeights,
		DispatchRate: q.DispatchRate, DispatchBurst: q.DispatchBurst,
		DispatchMode: q.DispatchMode, PushBatchSize: q.PushBatchSize,
	})
}

// decodeQueue reads a config column back; the columns of their own are the caller's to fill.
func decodeQueue(raw []byte) (courier.Queue, error) {
	var c queueConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return courier.Queue{}, err
	}
	return courier.Queue{
		PushURL: c.PushURL, Secrets: c.Secrets, AllowPrivate: c.AllowPrivate, ConcurrencyLimit: c.ConcurrencyLimit,
		Weights: c.Weights, PendingTimeout: c.PendingTimeout, ProcessingTimeout: c.ProcessingTimeout,
		PushTimeout: c.PushTimeout, HeartbeatTimeout: c.HeartbeatTimeout,
		Retry: courier.RetryPolicy{MaxAttempts: c.Retry.MaxAttempts, InitialInterval: c.Retry.InitialInterval,
			BackoffCoef: c.Retry.Backoff, MaxInterval: c.Retry.MaxInterval},
		SuccessRetention: c.SuccessRetention, PurgeAge: c.PurgeAge,
		InsertRate: c.InsertRate, InsertBurst: c.InsertBurst, MaxPending: c.MaxPending,
		PerKeyLimit: c.PerKeyLimit, FairKeys: c.FairKeys, KeyWeights: c.KeyWeights,
		DispatchRate: c.DispatchRate, DispatchBurst: c.DispatchBurst,
		DispatchMode: c.DispatchMode, PushBatchSize: c.PushBatchSize,
	}, nil
}

// overridesConfig is a task's overrides as its row keeps them.
type overridesConfig struct {
	PendingTimeout    time.Duration `json:"pending_timeout,omitempty"`
	ProcessingTimeout time.Duration `json:"processing_timeout,omitempty"`
	HeartbeatTimeout  time.Duration `json:"heartbeat_timeout,omitempty"`
	MaxAttempts       int           `json:"max_attempts,omitempty"`
}

// encodeOverrides is the overrides column of a task's row.
func encodeOverrides(o courier.TaskOverrides) ([]byte, error) {
	return json.Marshal(overridesConfig(o))
}

// decodeOverrides reads an overrides column back.
func decodeOverrides(raw []byte) (courier.TaskOverrides, error) {
	var c overridesConfig
	err := json.Unmarshal(raw, &c)
	return courier.TaskOverrides(c), err
}
