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
	var out Schedule
	cl := call{method: http.MethodPut, path: schedulePath(id), body: sp, out: &out, header: http.Header{"If-None-Match": {"*"}}}
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &out, nil
}

// PutSchedule creates schedule id or replaces its spec (keeping it paused if it is, unless
// sp.Paused); Schedule.Created says which. Safe to retry.
func (c *Client) PutSchedule(ctx context.Context, id string, sp ScheduleSpec) (*Schedule, error) {
	var out Schedule
	st, err := c.do(ctx, call{method: http.MethodPut, path: schedulePath(id), body: sp, idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	out.Created = st == http.StatusCreated
	return &out, nil
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
	v := url.Values{}
	if q.BizType != "" {
		v.Set("biz_type", q.BizType)
	}
	if q.Paused != nil {
		v.Set("paused", strconv.FormatBool(*q.Paused))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.PageToken != "" {
		v.Set("page_token", q.PageToken)
	}
	var out SchedulePage
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/schedules", query: v, idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// AllSchedules yields every schedule q selects, page after page. It stops at the first
// error, which it yields.
func (c *Client) AllSchedules(ctx context.Context, q ScheduleQuery) iter.Seq2[Schedule, error] {
	return pages(func(token string) ([]Schedule, string, error) {
		q.PageToken = token
		p, err := c.ListSchedules(ctx, q)
		if err != nil {
			return nil, "", err
		}
		return p.Items, p.NextPageToken, nil
	}, q.PageToken)
}

// GetSchedule describes a schedule: spec, state, next and recent runs.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodGet, path: schedulePath(id), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
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
	var out Schedule
	cl := call{method: http.MethodPost, path: schedulePath(id) + "/" + action, body: body, idempotent: idempotent, out: &out}
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &out, nil
}
