package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// TimerRequest arms a timer (POST /v1/timers, scope producer) at a fire time or after a delay
// (When: At or After). The same request again returns the timer the first one created, so a
// create is retried safely; a different request for the same biz_type and biz_id is
// ErrConflict.
type TimerRequest = api.TimerRequest

// Reschedule moves a timer (When: At or After).
type Reschedule = api.Reschedule

// Timer is a timer as the API shows it; Created says CreateTimer armed it (201).
type Timer = api.Timer

// TimerQuery selects timers for ListTimers. Zero fields do not filter.
type TimerQuery struct {
	BizType   string
	State     courier.TimerState // "" for every state
	PageSize  int                // 1–1000; 0: the gateway's default (100)
	PageToken string             // TimerPage.NextPageToken of the previous page
}

// TimerPage is one page of timers; NextPageToken is empty on the last.
type TimerPage = api.TimerPage

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
	return pages(func(token string) ([]Timer, string, error) {
		q.PageToken = token
		p, err := c.ListTimers(ctx, q)
		if err != nil {
			return nil, "", err
		}
		return p.Items, p.NextPageToken, nil
	}, q.PageToken)
}
