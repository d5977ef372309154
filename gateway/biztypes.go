package gateway

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/webhook"
)

// BizTypeStore is what the business-type endpoints need.
type BizTypeStore interface {
	PutBizType(ctx context.Context, b courier.BizType) (courier.BizType, bool, error)
	GetBizType(ctx context.Context, name string) (courier.BizType, error)
	ListBizTypes(ctx context.Context) ([]courier.BizType, error)
	DeleteBizType(ctx context.Context, name string) error
}

// RetryJSON is a retry policy in the API; durations are Go duration strings ("1s", "5m").
type RetryJSON struct {
	InitialInterval string  `json:"initial_interval,omitempty"`
	Backoff         float64 `json:"backoff,omitempty"`
	MaxInterval     string  `json:"max_interval,omitempty"`
	MaxAttempts     int     `json:"max_attempts,omitempty"`
}

// BizTypeRequest is the body of PUT /v1/biz-types/{name}. Omitted fields take their defaults.
type BizTypeRequest struct {
	Delivery       string    `json:"delivery"`
	CallbackURL    string    `json:"callback_url"`
	Secrets        []string  `json:"secrets"`
	Topic          string    `json:"topic"`
	RequestTimeout string    `json:"request_timeout"`
	Retry          RetryJSON `json:"retry"`
	RateLimit      float64   `json:"rate_limit_per_second"`
	AllowPrivate   bool      `json:"allow_private"`
	InsertRate     float64   `json:"insert_rate_per_second"` // timers created per second on each gateway; 0: unlimited
	InsertBurst    int       `json:"insert_burst"`           // 0: the rate rounded up
}

// BizTypeJSON is a business type as the API shows it; secrets are never shown, only counted.
type BizTypeJSON struct {
	Name            string    `json:"name"`
	Delivery        string    `json:"delivery"`
	CallbackURL     string    `json:"callback_url,omitempty"`
	SecretsCount    int       `json:"secrets_count"`
	GeneratedSecret string    `json:"generated_secret,omitempty"` // only in the response that created it
	Topic           string    `json:"topic,omitempty"`
	TaskQueue       string    `json:"task_queue"`
	RequestTimeout  string    `json:"request_timeout"`
	Retry           RetryJSON `json:"retry"`
	RateLimit       float64   `json:"rate_limit_per_second"`
	AllowPrivate    bool      `json:"allow_private"`
	InsertRate      float64   `json:"insert_rate_per_second"`
	InsertBurst     int       `json:"insert_burst"`
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

func bizTypeJSON(b courier.BizType) BizTypeJSON {
	return BizTypeJSON{
		Name: b.Name, Delivery: b.Delivery, CallbackURL: b.CallbackURL, SecretsCount: len(b.Secrets),
		Topic: b.Topic, TaskQueue: courier.BizTypeTaskQueue(b.Name), RequestTimeout: b.RequestTimeout.String(),
		Retry: RetryJSON{InitialInterval: b.RetryInitial.String(), Backoff: b.RetryBackoff,
			MaxInterval: b.RetryMax.String(), MaxAttempts: b.MaxAttempts},
		RateLimit: b.RateLimit, AllowPrivate: b.AllowPrivate, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
		InsertRate: b.InsertRate, InsertBurst: b.InsertBurst,
	}
}

func parseDur(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &courier.Error{Code: courier.CodeValidation, Message: field + " must be a positive duration such as \"10s\"",
			Details: map[string]any{"field": field}}
	}
	return d, nil
}

func (h *handlers) putBizType(c echo.Context) error {
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	var req BizTypeRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	b := courier.BizType{Name: name, Delivery: req.Delivery, CallbackURL: req.CallbackURL, Secrets: req.Secrets,
		Topic: req.Topic, RetryBackoff: req.Retry.Backoff, MaxAttempts: req.Retry.MaxAttempts,
		RateLimit: req.RateLimit, AllowPrivate: req.AllowPrivate, InsertRate: req.InsertRate, InsertBurst: req.InsertBurst}
	if err := checkSecrets(req.Secrets); err != nil {
		return err
	}
	if b.RequestTimeout, err = parseDur("request_timeout", req.RequestTimeout); err != nil {
		return err
	}
	if b.RetryInitial, err = parseDur("retry.initial_interval", req.Retry.InitialInterval); err != nil {
		return err
	}
	if b.RetryMax, err = parseDur("retry.max_interval", req.Retry.MaxInterval); err != nil {
		return err
	}
	// The store keeps the stored secrets when an http type names none; one that has none to
	// keep fails on the secrets field and gets a generated secret, shown once.
	generated := ""
	stored, created, err := h.d.BizTypes.PutBizType(c.Request().Context(), b)
	if b.Delivery == courier.DeliveryHTTP && len(b.Secrets) == 0 && errorField(err) == "secrets" {
		if generated, err = webhook.GenerateSecret(); err != nil {
			return err
		}
		b.Secrets = []string{generated}
		stored, created, err = h.d.BizTypes.PutBizType(c.Request().Context(), b)
	}
	if err != nil {
		return err
	}
	out := bizTypeJSON(stored)
	out.GeneratedSecret = generated
	if created {
		return c.JSON(http.StatusCreated, out)
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) getBizType(c echo.Context) error {
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	b, err := h.d.BizTypes.GetBizType(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, bizTypeJSON(b))
}

func (h *handlers) listBizTypes(c echo.Context) error {
	all, err := h.d.BizTypes.ListBizTypes(c.Request().Context())
	if err != nil {
		return err
	}
	out := make([]BizTypeJSON, 0, len(all))
	for _, b := range all {
		out = append(out, bizTypeJSON(b))
	}
	return c.JSON(http.StatusOK, map[string]any{"items": out})
}

func (h *handlers) deleteBizType(c echo.Context) error {
	name, err := pathName(c, "name")
	if err != nil {
		return err
	}
	if err := h.d.BizTypes.DeleteBizType(c.Request().Context(), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// errorField is the field a validation error names, or "".
func errorField(err error) string {
	var e *courier.Error
	if !errors.As(err, &e) || e.Code != courier.CodeValidation {
		return ""
	}
	field, _ := e.Details["field"].(string)
	return field
}

// checkSecrets refuses signing secrets the signer could not use (courier.CheckSigningSecret),
// before anything is stored.
func checkSecrets(secrets []string) error {
	for _, s := range secrets {
		if err := courier.CheckSigningSecret("secrets", s); err != nil {
			return err
		}
	}
	return nil
}
