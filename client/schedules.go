package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/courier-oss/courier/api"
)

// ScheduleSpec is a cron schedule (scope producer): give Cron or Interval.
type ScheduleSpec = api.ScheduleSpec

// Schedule is a schedule as the API shows it.
type Schedule = api.Schedule

func schedulePath(id string) string { return "/v1/schedules/" + seg(id) }

// CreateSchedule creates schedule id, never replacing one (PUT with If-None-Match: *). An
// existing id is ErrConflict (not retried after a lost answer: the repeat would say conflict).
func (c *Client) CreateSchedule(ctx context.Context, id string, sp ScheduleSpec) (*Schedule, error) {
	return fetch[Schedule](ctx, c, call{method: http.MethodPut, path: schedulePath(id), body: sp, header: http.Header{"If-None-Match": {"*"}}})
}

// PutSchedule creates schedule id or replaces its spec (keeping it paused if it is, unless
// sp.Paused); Schedule.Created says which. Safe to retry.
func (c *Client) PutSchedule(ctx context.Context, id string, sp ScheduleSpec) (*Schedule, error) {
	out, st, err := fetchStatus[Schedule](ctx, c, call{method: http.MethodPut, path: schedulePath(id), body: sp, idempotent: true})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return out, nil
}

// ScheduleQuery selects schedules for ListSchedules. Zero fields do not filter.
type ScheduleQuery struct {
	BizType   string
	Paused    *bool  // true: paused ones only; false: running ones only
	Limit     int    // schedules per page, 1–1000; 0: the gateway's default (100)
	PageToken string // SchedulePage.NextPageToken of the previous page
}

// SchedulePage is one page of schedules; NextPageToken is empty on the last.
type SchedulePage = api.SchedulePage

// ListSchedules reads one page of schedules (scope producer): each with its id, business type,
// pause, note and next runs (GetSchedule has the whole spec). A page may hold fewer than
// Limit while a NextPageToken follows; use AllSchedules to read them all.
func (c *Client) ListSchedules(ctx context.Context, q ScheduleQuery) (*SchedulePage, error) {
	v := listQuery{}.text("biz_type", q.BizType).number("limit", q.Limit).text("page_token", q.PageToken)
	if q.Paused != nil {
		v.text("paused", strconv.FormatBool(*q.Paused))
	}
	return fetch[SchedulePage](ctx, c, call{method: http.MethodGet, path: "/v1/schedules", query: url.Values(v), idempotent: true})
}

// AllSchedules yields every schedule q selects, page after page. It stops at the first
// error, which it yields.
func (c *Client) AllSchedules(ctx context.Context, q ScheduleQuery) iter.Seq2[Schedule, error] {
	return pages(&q.PageToken, func() (*api.List[Schedule], error) { return c.ListSchedules(ctx, q) })
}

// GetSchedule describes a schedule: spec, state, next and recent runs.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	return fetch[Schedule](ctx, c, call{method: http.MethodGet, path: schedulePath(id), idempotent: true})
}

// DeleteSchedule removes a schedule; runs already started finish.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, call{method: http.MethodDelete, path: schedulePath(id), idempotent: true})
	return err
}

// PauseSchedule pauses a schedule, with an optional note shown in Schedule.Note.
func (c *Client) PauseSchedule(ctx context.Context, id, note string) (*Schedule, error) {
	return c.scheduleAction(ctx, id, "pause", &api.ScheduleNote{Note: note}, true)
}

// UnpauseSchedule resumes a paused schedule, with an optional note.
func (c *Client) UnpauseSchedule(ctx context.Context, id, note string) (*Schedule, error) {
	return c.scheduleAction(ctx, id, "unpause", &api.ScheduleNote{Note: note}, true)
}

// TriggerSchedule runs a schedule's action once, now. Not retried after a lost answer (a
// repeat would run it twice).
func (c *Client) TriggerSchedule(ctx context.Context, id string) (*Schedule, error) {
	return c.scheduleAction(ctx, id, "trigger", nil, false)
}

func (c *Client) scheduleAction(ctx context.Context, id, action string, body any, idempotent bool) (*Schedule, error) {
	return fetch[Schedule](ctx, c, call{method: http.MethodPost, path: schedulePath(id) + "/" + action, body: body, idempotent: idempotent})
}
