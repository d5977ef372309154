package client

import (
	"context"
	"encoding/json"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/courier-oss/courier"
)

// TimerRequest arms a timer (POST /v1/timers, scope producer): at FireAt, or, when FireAt is
// zero, Delay after the gateway accepts it (a zero Delay fires at once). The same request again
// (same fire time or delay, and payload) returns the timer the first one created, so a create
// is retried safely; a different request for the same biz_type and biz_id is ErrConflict.
type TimerRequest struct {
	BizType string
	BizID   string
	FireAt  time.Time
	Delay   Duration
	Payload json.RawMessage // sent with the callback or message; optional
}

// timerWire is the request's JSON: fire_at, or delay when there is no fire_at (both when both
// are set, which the gateway refuses).
type timerWire struct {
	BizType string          `json:"biz_type,omitempty"`
	BizID   string          `json:"biz_id,omitempty"`
	FireAt  *time.Time      `json:"fire_at,omitempty"`
	Delay   *Duration       `json:"delay,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func whenWire(fireAt time.Time, delay Duration) (*time.Time, *Duration) {
	var at *time.Time
	var d *Duration
	if !fireAt.IsZero() {
		at = &fireAt
	}
	if fireAt.IsZero() || delay != 0 {
		d = &delay
	}
	return at, d
}

// MarshalJSON writes the request as the gateway takes it.
func (r TimerRequest) MarshalJSON() ([]byte, error) {
	w := timerWire{BizType: r.BizType, BizID: r.BizID, Payload: r.Payload}
	w.FireAt, w.Delay = whenWire(r.FireAt, r.Delay)
	return json.Marshal(w)
}

// Reschedule moves a timer: to FireAt, or, when FireAt is zero, Delay from now.
type Reschedule struct {
	FireAt time.Time
	Delay  Duration
}

// MarshalJSON writes the request as the gateway takes it.
func (r Reschedule) MarshalJSON() ([]byte, error) {
	var w timerWire
	w.FireAt, w.Delay = whenWire(r.FireAt, r.Delay)
	return json.Marshal(w)
}

// Timer is a timer as the API shows it.
type Timer struct {
	BizType    string             `json:"biz_type"`
	BizID      string             `json:"biz_id"`
	State      courier.TimerState `json:"state"` // courier.TimerScheduled, courier.TimerFiring, …
	FireAt     time.Time          `json:"fire_at"`
	Attempts   int                `json:"attempts"`
	LastError  string             `json:"last_error,omitempty"`
	Version    int                `json:"version"`
	WorkflowID string             `json:"workflow_id"`
	Payload    json.RawMessage    `json:"payload,omitempty"`

	Created bool `json:"-"` // CreateTimer: this call armed it (201); false: it existed (200)
}

// TimerQuery selects timers for ListTimers. Zero fields do not filter.
type TimerQuery struct {
	BizType   string
	State     courier.TimerState // "" for every state
	PageSize  int                // 1–1000; 0: the gateway's default (100)
	PageToken string             // TimerPage.NextPageToken of the previous page
}

// TimerPage is one page of timers; NextPageToken is empty on the last.
type TimerPage struct {
	Items         []Timer `json:"items"`
	NextPageToken string  `json:"next_page_token,omitempty"`
}

func timerPath(bizType, bizID string) string { return "/v1/timers/" + seg(bizType) + "/" + seg(bizID) }

// CreateTimer arms a timer.
func (c *Client) CreateTimer(ctx context.Context, r TimerRequest) (*Timer, error) {
	var out Timer
	st, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/timers", body: r, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return &out, nil
}

// GetTimer reads a timer's state.
func (c *Client) GetTimer(ctx context.Context, bizType, bizID string) (*Timer, error) {
	var out Timer
	if _, err := c.do(ctx, call{method: http.MethodGet, path: timerPath(bizType, bizID), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// RescheduleTimer moves a scheduled timer. A timer that already fired or was cancelled is
// ErrConflict; with no worker to take the change, ErrUnavailable (retried within the policy).
func (c *Client) RescheduleTimer(ctx context.Context, bizType, bizID string, r Reschedule) (*Timer, error) {
	var out Timer
	if _, err := c.do(ctx, call{method: http.MethodPatch, path: timerPath(bizType, bizID), body: r, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelTimer cancels a timer; the answer's State says whether it had already fired.
func (c *Client) CancelTimer(ctx context.Context, bizType, bizID string) (*Timer, error) {
	var out Timer
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: timerPath(bizType, bizID), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTimers reads one page of timers; pass NextPageToken as q.PageToken for the next one, or
// use AllTimers.
func (c *Client) ListTimers(ctx context.Context, q TimerQuery) (*TimerPage, error) {
	v := url.Values{}
	for k, s := range map[string]string{"biz_type": q.BizType, "state": string(q.State), "page_token": q.PageToken} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.PageSize != 0 {
		v.Set("page_size", strconv.Itoa(q.PageSize))
	}
	var out TimerPage
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/timers", query: v, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// AllTimers yields every timer q selects, page after page. It stops at the first error, which
// it yields.
func (c *Client) AllTimers(ctx context.Context, q TimerQuery) iter.Seq2[Timer, error] {
	return func(yield func(Timer, error) bool) {
		for {
			page, err := c.ListTimers(ctx, q)
			if err != nil {
				yield(Timer{}, err)
				return
			}
			for _, t := range page.Items {
				if !yield(t, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			q.PageToken = page.NextPageToken
		}
	}
}
