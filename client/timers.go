package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"time"

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
	BizType string
	State   courier.TimerState // "" for every state
	// FinishedAfter and FinishedBefore select timers by when they were delivered, failed or
	// cancelled.
	FinishedAfter, FinishedBefore time.Time
	Limit                         int    // timers per page, 1–1000; 0: the gateway's default (100)
	PageToken                     string // TimerPage.NextPageToken of the previous page
}

// TimerPage is one page of timers; NextPageToken is empty on the last.
type TimerPage = api.TimerPage

func timerPath(bizType, bizID string) string { return "/v1/timers/" + seg(bizType) + "/" + seg(bizID) }

// CreateTimer arms a timer.
func (c *Client) CreateTimer(ctx context.Context, r TimerRequest) (*Timer, error) {
	out, st, err := fetchStatus[Timer](ctx, c, call{method: http.MethodPost, path: "/v1/timers", body: r, idempotent: true})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return out, nil
}

// GetTimer reads a timer's state.
func (c *Client) GetTimer(ctx context.Context, bizType, bizID string) (*Timer, error) {
	return fetch[Timer](ctx, c, call{method: http.MethodGet, path: timerPath(bizType, bizID), idempotent: true})
}

// RescheduleTimer moves a scheduled timer. A timer that already fired or was cancelled is
// ErrConflict; with no worker to take the change, ErrUnavailable (retried within the policy).
func (c *Client) RescheduleTimer(ctx context.Context, bizType, bizID string, r Reschedule) (*Timer, error) {
	return fetch[Timer](ctx, c, call{method: http.MethodPatch, path: timerPath(bizType, bizID), body: r, idempotent: true})
}

// CancelTimer cancels a timer; the answer's State says whether it had already fired.
func (c *Client) CancelTimer(ctx context.Context, bizType, bizID string) (*Timer, error) {
	return fetch[Timer](ctx, c, call{method: http.MethodDelete, path: timerPath(bizType, bizID), idempotent: true})
}

// ListTimers reads one page of timers; pass NextPageToken as q.PageToken for the next one, or
// use AllTimers.
func (c *Client) ListTimers(ctx context.Context, q TimerQuery) (*TimerPage, error) {
	v := listQuery{}.text("biz_type", q.BizType).text("state", string(q.State)).text("page_token", q.PageToken).
		number("limit", q.Limit).time("finished_after", q.FinishedAfter).time("finished_before", q.FinishedBefore)
	return fetch[TimerPage](ctx, c, call{method: http.MethodGet, path: "/v1/timers", query: url.Values(v), idempotent: true})
}

// AllTimers yields every timer q selects, page after page. It stops at the first error, which
// it yields.
func (c *Client) AllTimers(ctx context.Context, q TimerQuery) iter.Seq2[Timer, error] {
	return pages(&q.PageToken, func() (*api.List[Timer], error) { return c.ListTimers(ctx, q) })
}

// TimerBatchResult answers CreateTimers: every timer's own outcome, in the request's order.
type TimerBatchResult = api.TimerBatchResult

// CreateTimers arms up to 1,000 timers in one request (POST /v1/timers/batch, scope
// producer). Each is answered on its own (Items[i].Outcome: created, existing or refused, with
// the timer or the error); a refused one writes nothing and refuses no other. Retried like
// CreateTimer: a repeat of an armed timer answers existing.
func (c *Client) CreateTimers(ctx context.Context, reqs []TimerRequest) (*TimerBatchResult, error) {
	return fetch[TimerBatchResult](ctx, c, call{method: http.MethodPost, path: "/v1/timers/batch", body: api.TimerBatch{Timers: reqs},
		idempotent: true})
}

// RedeliverTimer delivers a failed timer again (scope admin): a new delivery id, the type's
// whole retry budget, now. ErrConflict when the timer has not failed.
func (c *Client) RedeliverTimer(ctx context.Context, bizType, bizID string) (*Timer, error) {
	return fetch[Timer](ctx, c, call{method: http.MethodPost, path: timerPath(bizType, bizID) + "/redeliver"})
}

// TimerRedeliverFilter selects the failed timers RedeliverTimers delivers again.
type TimerRedeliverFilter = api.TimerRedeliverFilter

// TimerRedeliverResult says what RedeliverTimers did.
type TimerRedeliverResult = api.TimerRedeliverResult

// RedeliverTimers delivers again the failed timers of a business type that f selects, at most
// f.Max (default 100) per call (POST /v1/timers/redeliver, scope admin); More says whether
// others remain. Safe to retry: a repeat redelivers only timers still failed.
func (c *Client) RedeliverTimers(ctx context.Context, f TimerRedeliverFilter) (*TimerRedeliverResult, error) {
	return fetch[TimerRedeliverResult](ctx, c, call{method: http.MethodPost, path: "/v1/timers/redeliver", body: f, idempotent: true})
}
