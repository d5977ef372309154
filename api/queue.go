package api

import (
	"time"

	"github.com/courier-oss/courier"
)

// Retry is a retry policy of a queue or a business type. In a request zero fields take their
// defaults.
type Retry struct {
	InitialInterval PositiveDuration `json:"initial_interval,omitzero"`
	Backoff         float64          `json:"backoff,omitempty"`
	MaxInterval     PositiveDuration `json:"max_interval,omitzero"`
	MaxAttempts     int              `json:"max_attempts,omitempty"`
}

// QueueConfig is the body of PUT /v1/queues/{name} (scope admin). A PUT replaces the whole
// configuration; zero fields take their defaults (docs/tasks.md), except Secrets: nil (left
// out) keeps the stored ones, an empty list removes them.
type QueueConfig struct {
	PushURL           string           `json:"push_url,omitempty"`
	Secrets           []string         `json:"secrets,omitzero"` // whsec_… push-signing secrets; two during a rotation
	AllowPrivate      bool             `json:"allow_private,omitempty"`
	ConcurrencyLimit  int              `json:"concurrency_limit,omitempty"`
	Weights           []int            `json:"weights,omitempty"` // one weight per priority band, 1 to 5
	PendingTimeout    PositiveDuration `json:"pending_timeout,omitzero"`
	ProcessingTimeout PositiveDuration `json:"processing_timeout,omitzero"`
	PushTimeout       PositiveDuration `json:"push_timeout,omitzero"`
	HeartbeatTimeout  Duration         `json:"heartbeat_timeout,omitzero"` // zero: off
	Retry             Retry            `json:"retry,omitzero"`
	SuccessRetention  PositiveDuration `json:"success_retention,omitzero"`
	PurgeAge          PositiveDuration `json:"purge_age,omitzero"`
	InsertRate        float64          `json:"insert_rate_per_second,omitempty"` // admission control; 0: unlimited
	InsertBurst       int              `json:"insert_burst,omitempty"`
	MaxPending        int              `json:"max_pending,omitempty"` // 0: unbounded backlog
	// Flow control (docs/flow-control.md): per concurrency key, and the dispatch rate.
	PerKeyLimit   int            `json:"per_key_limit,omitempty"` // 0: no per-key limit
	FairKeys      bool           `json:"fair_keys,omitempty"`     // keys take turns within a band
	KeyWeights    map[string]int `json:"key_weights,omitempty"`   // a key's share of the turns; default 1
	DispatchRate  float64        `json:"dispatch_rate_per_second,omitempty"`
	DispatchBurst int            `json:"dispatch_burst,omitempty"`
	// DispatchMode is how the queue's attempts run (docs/tasks.md, "Dispatch modes"):
	// "per-attempt" (the default: one workflow run per attempt) or "batched" (one run pushes a
	// whole claim; deadlines kept in the database).
	DispatchMode courier.DispatchMode `json:"dispatch_mode,omitempty"`
	// PushBatchSize is how many attempts one push carries (a TaskPushBatch when above 1);
	// batched mode only; 0 or 1: one attempt per push.
	PushBatchSize int `json:"push_batch_size,omitempty"`
}

// Domain is the configuration as the task service takes it, for the queue called name; the
// weights are checked here, since a fixed-size array cannot tell a short list from a full one.
func (c QueueConfig) Domain(name string) (courier.Queue, error) {
	q := courier.Queue{Name: name, PushURL: c.PushURL, Secrets: c.Secrets, AllowPrivate: c.AllowPrivate,
		ConcurrencyLimit: c.ConcurrencyLimit, PendingTimeout: c.PendingTimeout.Std(), ProcessingTimeout: c.ProcessingTimeout.Std(),
		PushTimeout: c.PushTimeout.Std(), HeartbeatTimeout: c.HeartbeatTimeout.Std(),
		Retry: courier.RetryPolicy{MaxAttempts: c.Retry.MaxAttempts, InitialInterval: c.Retry.InitialInterval.Std(),
			BackoffCoef: c.Retry.Backoff, MaxInterval: c.Retry.MaxInterval.Std()},
		SuccessRetention: c.SuccessRetention.Std(), PurgeAge: c.PurgeAge.Std(),
		InsertRate: c.InsertRate, InsertBurst: c.InsertBurst, MaxPending: c.MaxPending,
		PerKeyLimit: c.PerKeyLimit, FairKeys: c.FairKeys, KeyWeights: c.KeyWeights, DispatchRate: c.DispatchRate, DispatchBurst: c.DispatchBurst,
		DispatchMode: c.DispatchMode, PushBatchSize: c.PushBatchSize}
	if c.Weights != nil {
		w, err := courier.BandWeightsOf(c.Weights)
		if err != nil {
			return courier.Queue{}, err
		}
		q.Weights = w
	}
	return q, nil
}

// Queue is a queue as the API shows it; secrets are only counted.
type Queue struct {
	Name              string               `json:"name"`
	PushURL           string               `json:"push_url"`
	SecretsCount      int                  `json:"secrets_count"`
	AllowPrivate      bool                 `json:"allow_private"`
	ConcurrencyLimit  int                  `json:"concurrency_limit"`
	InFlight          int                  `json:"in_flight"`
	Weights           courier.BandWeights  `json:"weights"`
	PendingTimeout    Duration             `json:"pending_timeout"`
	ProcessingTimeout Duration             `json:"processing_timeout"`
	PushTimeout       Duration             `json:"push_timeout"`
	HeartbeatTimeout  Duration             `json:"heartbeat_timeout"` // "0s": off
	Retry             Retry                `json:"retry"`
	SuccessRetention  Duration             `json:"success_retention"`
	PurgeAge          Duration             `json:"purge_age"`
	CreatedAt         time.Time            `json:"created_at"`
	UpdatedAt         time.Time            `json:"updated_at"`
	InsertRate        float64              `json:"insert_rate_per_second"`
	InsertBurst       int                  `json:"insert_burst"`
	MaxPending        int                  `json:"max_pending"`
	PerKeyLimit       int                  `json:"per_key_limit"`
	FairKeys          bool                 `json:"fair_keys"` // true also when set by per_key_limit or key_weights
	KeyWeights        map[string]int       `json:"key_weights,omitempty"`
	DispatchRate      float64              `json:"dispatch_rate_per_second"`
	DispatchBurst     int                  `json:"dispatch_burst"`   // the bucket's size in force
	DispatchMode      courier.DispatchMode `json:"dispatch_mode"`    // per-attempt or batched
	PushBatchSize     int                  `json:"push_batch_size"`  // attempts per push (1: one)
	Paused            *Pause               `json:"paused,omitempty"` // set while the queue is paused

	// Created is set by the Go client: the PUT created the queue (201) rather than replaced
	// it. It is never in the JSON.
	Created bool `json:"-"`
}

// QueueOf shows a stored queue.
func QueueOf(q courier.Queue) Queue {
	out := Queue{
		Name: q.Name, PushURL: q.PushURL, SecretsCount: len(q.Secrets), AllowPrivate: q.AllowPrivate,
		ConcurrencyLimit: q.ConcurrencyLimit, InFlight: q.InFlight, Weights: q.Weights,
		PendingTimeout: Duration(q.PendingTimeout), ProcessingTimeout: Duration(q.ProcessingTimeout),
		PushTimeout: Duration(q.PushTimeout), HeartbeatTimeout: Duration(q.HeartbeatTimeout),
		Retry: Retry{InitialInterval: PositiveDuration(q.Retry.InitialInterval), Backoff: q.Retry.BackoffCoef,
			MaxInterval: PositiveDuration(q.Retry.MaxInterval), MaxAttempts: q.Retry.MaxAttempts},
		SuccessRetention: Duration(q.SuccessRetention), PurgeAge: Duration(q.PurgeAge),
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt,
		InsertRate: q.InsertRate, InsertBurst: q.InsertBurst, MaxPending: q.MaxPending,
		PerKeyLimit: q.PerKeyLimit, FairKeys: q.Keyed(), KeyWeights: q.KeyWeights, DispatchRate: q.DispatchRate,
		DispatchMode: q.DispatchMode, PushBatchSize: q.PushBatchSize,
	}
	if q.DispatchRate > 0 {
		out.DispatchBurst = q.DispatchBucket()
	}
	return out
}

// Config is the configuration that keeps q as it is when PUT back (secrets left out: a PUT
// without them keeps the stored ones), for a read-modify-write of one setting. Values that
// follow from others stay implied: fair_keys when a per-key limit or key weights imply it, the
// dispatch burst when it is the rate rounded up.
func (q Queue) Config() QueueConfig {
	c := QueueConfig{PushURL: q.PushURL, AllowPrivate: q.AllowPrivate, ConcurrencyLimit: q.ConcurrencyLimit,
		Weights:        q.Weights[:],
		PendingTimeout: PositiveDuration(q.PendingTimeout), ProcessingTimeout: PositiveDuration(q.ProcessingTimeout),
		PushTimeout: PositiveDuration(q.PushTimeout), HeartbeatTimeout: q.HeartbeatTimeout, Retry: q.Retry,
		SuccessRetention: PositiveDuration(q.SuccessRetention), PurgeAge: PositiveDuration(q.PurgeAge),
		InsertRate: q.InsertRate, InsertBurst: q.InsertBurst, MaxPending: q.MaxPending,
		PerKeyLimit: q.PerKeyLimit, KeyWeights: q.KeyWeights, DispatchRate: q.DispatchRate,
		DispatchMode: q.DispatchMode, PushBatchSize: q.PushBatchSize}
	c.FairKeys = q.FairKeys && q.PerKeyLimit == 0 && len(q.KeyWeights) == 0
	if q.DispatchRate > 0 && q.DispatchBurst != (courier.Queue{DispatchRate: q.DispatchRate}).DispatchBucket() {
		c.DispatchBurst = q.DispatchBurst
	}
	return c
}
