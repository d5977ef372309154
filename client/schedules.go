package client

import (
	"context"
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

// CreateSchedule creates schedule id. An existing id is ErrConflict (not retried after a lost
// answer: the repeat would say conflict).
func (c *Client) CreateSchedule(ctx context.Context, id string, sp ScheduleSpec) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodPost, path: schedulePath(id), body: sp, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSchedule describes a schedule: spec, state, next and recent runs.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodGet, path: schedulePath(id), idempotent: true, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateSchedule replaces a schedule's spec (keeping it paused if it is, unless sp.Paused).
func (c *Client) UpdateSchedule(ctx context.Context, id string, sp ScheduleSpec) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodPatch, path: schedulePath(id), body: sp, idempotent: true, out: &out}); err != nil {
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

// SchedulePage is one page of schedules.
type SchedulePage = api.SchedulePage

// ScheduleQuery selects schedules for ListSchedules: by business type, paused (nil: both),
// PageSize (default 100, at most 1,000) and PageToken (the previous page's NextPageToken).
type ScheduleQuery struct {
	BizType   string
	Paused    *bool
	PageSize  int
	PageToken string
}

// ListSchedules reads one page of the schedules on the timer wheel (those of bucketed business
// types), by id.
func (c *Client) ListSchedules(ctx context.Context, q ScheduleQuery) (*SchedulePage, error) {
	v := url.Values{}
	if q.BizType != "" {
		v.Set("biz_type", q.BizType)
	}
	if q.Paused != nil {
		v.Set("paused", strconv.FormatBool(*q.Paused))
	}
	if q.PageSize != 0 {
		v.Set("page_size", strconv.Itoa(q.PageSize))
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
