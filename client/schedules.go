package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// ScheduleSpec is a cron schedule (scope producer): give Cron or Interval. At each run courier
// delivers Payload the way BizType is configured, like a timer.
type ScheduleSpec struct {
	BizType       string          `json:"biz_type"`
	Cron          string          `json:"cron,omitempty"`          // standard 5-field cron, e.g. "0 9 * * *"
	Interval      Duration        `json:"interval,omitzero"`       // e.g. 15 minutes
	TimeZone      string          `json:"time_zone,omitempty"`     // IANA name; default UTC
	Overlap       string          `json:"overlap,omitempty"`       // skip (default), buffer_one, buffer_all, cancel_other, terminate_other, allow_all
	CatchupWindow Duration        `json:"catchup_window,omitzero"` // how late a missed run may still fire; default 1m, at least 10s
	Jitter        Duration        `json:"jitter,omitzero"`         // random delay up to this
	Paused        bool            `json:"paused,omitempty"`        // create (or keep) it paused
	Payload       json.RawMessage `json:"payload,omitempty"`
}

// Schedule is a schedule as the API shows it.
type Schedule struct {
	ID             string       `json:"id"`
	Spec           ScheduleSpec `json:"spec"`
	Paused         bool         `json:"paused"`
	Note           string       `json:"note,omitempty"`
	NextRuns       []time.Time  `json:"next_runs"`
	RecentRuns     []time.Time  `json:"recent_runs"`
	Runs           int          `json:"runs"`
	MissedCatchup  int          `json:"missed_catchup_window"`
	SkippedOverlap int          `json:"skipped_overlap"`
}

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

// scheduleNote is the optional body of pause and unpause.
type scheduleNote struct {
	Note string `json:"note,omitempty"`
}

// PauseSchedule pauses a schedule, with an optional note shown in Schedule.Note.
func (c *Client) PauseSchedule(ctx context.Context, id, note string) (*Schedule, error) {
	return c.scheduleAction(ctx, id, "pause", &scheduleNote{Note: note}, true)
}

// UnpauseSchedule resumes a paused schedule, with an optional note.
func (c *Client) UnpauseSchedule(ctx context.Context, id, note string) (*Schedule, error) {
	return c.scheduleAction(ctx, id, "unpause", &scheduleNote{Note: note}, true)
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
