package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// CourierClient calls the few endpoints of courier's gateway this example needs. Every call
// carries Authorization: Bearer Key.
type CourierClient struct {
	BaseURL string       // e.g. http://127.0.0.1:8080
	Key     string       // API key: producer scope for timers, admin for business types
	HTTP    *http.Client // nil means a client with a 10 s timeout
}

// CourierResponse is one answer of the gateway: its status and raw JSON body.
type CourierResponse struct {
	Status int
	Body   []byte
}

// OK reports a 2xx answer.
func (r CourierResponse) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Message is the error message of a non-2xx answer ({"error":{"code","message"}}), or the
// status text when the body has none.
func (r CourierResponse) Message() string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
}

var defaultCourierHTTP = &http.Client{Timeout: 10 * time.Second}

// do sends one request. A transport failure is an error; any HTTP answer is a response.
func (c *CourierClient) do(ctx context.Context, method, path string, in any) (CourierResponse, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return CourierResponse{}, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, body)
	if err != nil {
		return CourierResponse{}, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Key != "" {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultCourierHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return CourierResponse{}, fmt.Errorf("courier: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return CourierResponse{}, fmt.Errorf("courier: %s %s: read answer: %w", method, path, err)
	}
	return CourierResponse{Status: resp.StatusCode, Body: b}, nil
}

func timerPath(bizType, bizID string) string {
	return "/v1/timers/" + url.PathEscape(bizType) + "/" + url.PathEscape(bizID)
}

// CancelTimer is DELETE /v1/timers/{biz_type}/{biz_id}: 200 cancelled, 409 already fired or
// cancelled, 404 unknown (for an outbox-armed timer: the relay has not created it yet).
func (c *CourierClient) CancelTimer(ctx context.Context, bizType, bizID string) (CourierResponse, error) {
	return c.do(ctx, http.MethodDelete, timerPath(bizType, bizID), nil)
}

// RescheduleTimer is PATCH /v1/timers/{biz_type}/{biz_id}: 200 with the timer, 409 when it
// already fired or was cancelled.
func (c *CourierClient) RescheduleTimer(ctx context.Context, bizType, bizID string, r api.Reschedule) (CourierResponse, error) {
	return c.do(ctx, http.MethodPatch, timerPath(bizType, bizID), r)
}

// Setup configures the business type on courier and prints its signing secret.
//
// A PUT without secrets makes courier generate a new one, and on an existing type that new
// secret REPLACES the old one (the PUT answers 200 with generated_secret): the running orders
// service would then reject every callback. So unless rotate is set, Setup first asks whether
// the type exists and, if so, leaves it alone and says to reuse the secret from the first run.
func Setup(ctx context.Context, c *CourierClient, bizType, callbackURL string, rotate bool, out io.Writer) error {
	if c.Key == "" {
		return errors.New("setup: an admin API key is required: --courier-key or COURIER_API_KEY " +
			"(courier dev keeps its admin key in .courier/dev-api-key)")
	}
	path := "/v1/biz-types/" + url.PathEscape(bizType)
	if !rotate {
		resp, err := c.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		switch {
		case resp.OK():
			var b api.BizType
			_ = json.Unmarshal(resp.Body, &b)
			printExisting(out, bizType, b.CallbackURL)
			return nil
		case resp.Status != http.StatusNotFound:
			return fmt.Errorf("setup: GET %s: %s", path, resp.Message())
		}
	}
	// No secrets: courier generates one and shows it once, as generated_secret.
	resp, err := c.do(ctx, http.MethodPut, path, api.BizTypeConfig{Delivery: courier.DeliveryHTTP, CallbackURL: callbackURL})
	if err != nil {
		return err
	}
	if !resp.OK() {
		return fmt.Errorf("setup: PUT %s: %s", path, resp.Message())
	}
	var b api.BizType
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return fmt.Errorf("setup: PUT %s: unreadable answer: %w", path, err)
	}
	switch {
	case resp.Status == http.StatusCreated && b.GeneratedSecret != "":
		fmt.Fprintf(out, "created business type %s: signed HTTP callbacks to %s\n", bizType, callbackURL)
		fmt.Fprintf(out, "courier generated its signing secret and will not show it again; start orders with it:\n\n")
		fmt.Fprintf(out, "export ORDER_TIMER_SECRET='%s'\n", b.GeneratedSecret)
	case b.GeneratedSecret != "":
		fmt.Fprintf(out, "business type %s already existed and was updated: callbacks to %s\n", bizType, callbackURL)
		fmt.Fprintf(out, "courier REPLACED its signing secret; the previous one no longer verifies. Restart orders with:\n\n")
		fmt.Fprintf(out, "export ORDER_TIMER_SECRET='%s'\n", b.GeneratedSecret)
	default:
		printExisting(out, bizType, b.CallbackURL)
	}
	return nil
}

func printExisting(out io.Writer, bizType, callbackURL string) {
	fmt.Fprintf(out, "business type %s already exists (callbacks to %s); nothing changed.\n", bizType, callbackURL)
	fmt.Fprintf(out, "Its secret was generated when it was created and is never shown again: reuse that ORDER_TIMER_SECRET.\n")
	fmt.Fprintf(out, "Lost it? `setup --rotate` makes courier generate a new one (the old one stops verifying).\n")
}
