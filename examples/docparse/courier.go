package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/courier-oss/courier"
)

// CourierClient posts heartbeats and results to the URLs a push names. Every call carries
// Authorization: Bearer Key.
type CourierClient struct {
	Key  string       // API key with the worker scope
	HTTP *http.Client // nil means a client with a 10 s timeout
}

// CourierResponse is one answer of the gateway: its status and raw JSON body.
type CourierResponse struct {
	Status int
	Body   []byte
}

// OK reports a 2xx answer.
func (r CourierResponse) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Gone reports an answer that says the attempt is no longer current: 409 (it timed out, was
// cancelled or already has a result; a newer attempt may be running) or 404 (the task version
// is gone). Work on it should stop; nothing more will be accepted for it.
func (r CourierResponse) Gone() bool {
	return r.Status == http.StatusConflict || r.Status == http.StatusNotFound
}

// Retryable reports an answer worth retrying: 429 or 5xx.
func (r CourierResponse) Retryable() bool {
	return r.Status == http.StatusTooManyRequests || r.Status >= 500
}

// Message is the error message of a non-2xx answer ({"error":{"code","message"}}), or the
// status text when the body has none.
func (r CourierResponse) Message() string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(r.Body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
}

var defaultCourierHTTP = &http.Client{Timeout: 10 * time.Second}

// heartbeatBody is the body of POST heartbeat_url.
type heartbeatBody struct {
	Attempt int `json:"attempt"`
}

// Heartbeat tells courier that attempt is alive: 200 extends its heartbeat timeout, 409 means
// it is no longer current.
func (c *CourierClient) Heartbeat(ctx context.Context, url string, attempt int) (CourierResponse, error) {
	return c.post(ctx, url, heartbeatBody{Attempt: attempt})
}

// Result reports how an attempt ended: 202 accepted, 409 no longer current.
func (c *CourierClient) Result(ctx context.Context, url string, r courier.TaskResult) (CourierResponse, error) {
	return c.post(ctx, url, r)
}

// post sends one JSON request. A transport failure is an error; any HTTP answer is a response.
func (c *CourierClient) post(ctx context.Context, url string, in any) (CourierResponse, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return CourierResponse{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return CourierResponse{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Key)
	hc := c.HTTP
	if hc == nil {
		hc = defaultCourierHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return CourierResponse{}, fmt.Errorf("courier: POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return CourierResponse{}, fmt.Errorf("courier: POST %s: read answer: %w", url, err)
	}
	return CourierResponse{Status: resp.StatusCode, Body: body}, nil
}
