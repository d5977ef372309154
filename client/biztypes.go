package client

import (
	"context"
	"net/http"
	"time"
)

// Retry is a retry policy (business types and queues). Zero fields take the gateway's defaults.
type Retry struct {
	InitialInterval Duration `json:"initial_interval,omitzero"`
	Backoff         float64  `json:"backoff,omitempty"`
	MaxInterval     Duration `json:"max_interval,omitzero"`
	MaxAttempts     int      `json:"max_attempts,omitempty"`
}

// BizTypeConfig is a business type's configuration (PUT /v1/biz-types/{name}, scope admin).
// A PUT replaces the whole configuration; omitted fields take their defaults, except Secrets:
// nil keeps the stored ones (an http type without any gets a generated one, shown once in
// BizType.GeneratedSecret).
type BizTypeConfig struct {
	Delivery       string   `json:"delivery"`               // "http" (signed callback) or "mq" (publish to Topic)
	CallbackURL    string   `json:"callback_url,omitempty"` // http delivery
	Secrets        []string `json:"secrets,omitzero"`       // whsec_… signing secrets, newest first
	Topic          string   `json:"topic,omitempty"`        // mq delivery
	RequestTimeout Duration `json:"request_timeout,omitzero"`
	Retry          Retry    `json:"retry,omitzero"`
	RateLimit      float64  `json:"rate_limit_per_second,omitempty"`  // deliveries per second across all workers; 0: unlimited
	AllowPrivate   bool     `json:"allow_private,omitempty"`          // callbacks may reach private networks
	InsertRate     float64  `json:"insert_rate_per_second,omitempty"` // timers created per second on each gateway; 0: unlimited
	InsertBurst    int      `json:"insert_burst,omitempty"`           // 0: the rate rounded up
}

// BizType is a business type as the API shows it; secrets are only counted.
type BizType struct {
	Name            string    `json:"name"`
	Delivery        string    `json:"delivery"`
	CallbackURL     string    `json:"callback_url,omitempty"`
	SecretsCount    int       `json:"secrets_count"`
	GeneratedSecret string    `json:"generated_secret,omitempty"` // only in the answer that generated it
	Topic           string    `json:"topic,omitempty"`
	TaskQueue       string    `json:"task_queue"` // the Temporal task queue its deliveries run on
	RequestTimeout  Duration  `json:"request_timeout"`
	Retry           Retry     `json:"retry"`
	RateLimit       float64   `json:"rate_limit_per_second"`
	AllowPrivate    bool      `json:"allow_private"`
	InsertRate      float64   `json:"insert_rate_per_second"`
	InsertBurst     int       `json:"insert_burst"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`

	Created bool `json:"-"` // PutBizType: the call created it (201) rather than replaced it
}

// PutBizType creates or replaces a business type (scope admin).
func (c *Client) PutBizType(ctx context.Context, name string, cfg BizTypeConfig) (*BizType, error) {
	var out BizType
	st, err := c.do(ctx, call{method: http.MethodPut, path: "/v1/biz-types/" + seg(name), body: cfg, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return &out, nil
}

// GetBizType reads one business type (scope admin).
func (c *Client) GetBizType(ctx context.Context, name string) (*BizType, error) {
	var out BizType
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/biz-types/" + seg(name), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListBizTypes reads every business type (scope admin).
func (c *Client) ListBizTypes(ctx context.Context) ([]BizType, error) {
	var out struct {
		Items []BizType `json:"items"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/biz-types", idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// DeleteBizType removes a business type (scope admin).
func (c *Client) DeleteBizType(ctx context.Context, name string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/biz-types/" + seg(name), idempotent: true})
	return err
}
