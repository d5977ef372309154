package api

import (
	"encoding/json"
	"time"
)

// ScheduleSpec is a cron schedule (PUT /v1/schedules/{id}, scope producer): give Cron or
// Interval. At each run courier delivers Payload the way BizType is configured, like a timer.
type ScheduleSpec struct {
	BizType       string           `json:"biz_type"`
	Cron          string           `json:"cron,omitempty"`          // standard 5-field cron, e.g. "0 9 * * *"
	Interval      PositiveDuration `json:"interval,omitzero"`       // e.g. "15m"; at least 1s
	TimeZone      string           `json:"time_zone,omitempty"`     // IANA name; default UTC
	Overlap       string           `json:"overlap,omitempty"`       // skip (default), buffer_one, buffer_all, cancel_other, terminate_other, allow_all
	CatchupWindow PositiveDuration `json:"catchup_window,omitzero"` // how late a missed run may still fire; default 1m, at least 10s
	Jitter        Duration         `json:"jitter,omitzero"`         // random delay up to this, to spread round times
	Paused        bool             `json:"paused,omitempty"`        // create (or keep) it paused
	Payload       json.RawMessage  `json:"payload,omitempty"`
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
	// Mode is where the schedule fires: "workflow" (a Temporal Schedule, each run a workflow)
	// or "bucketed" (on the timer wheel: its business type was bucketed when it was created).
	Mode string `json:"mode,omitempty"`
	// BizTypePaused is set while the schedule's business type is paused: runs that fall due
	// wait, and are delivered on resume (Paused is the schedule's own pause, which skips runs).
	BizTypePaused *Pause `json:"biz_type_paused,omitempty"`

	// Created is set by the Go client's PutSchedule: this request created the schedule (201)
	// rather than replaced it. It is never in the JSON.
	Created bool `json:"-"`
}

// SchedulePage is one page of GET /v1/schedules; NextPageToken is empty on the last. An item
// carries the id, spec.biz_type, the schedule's own pause and note and its next runs; GET
// /v1/schedules/{id} has the whole spec and the recent runs.
type SchedulePage = List[Schedule]

// ScheduleNote is the optional body of POST /v1/schedules/{id}/pause and /unpause.
type ScheduleNote struct {
	Note string `json:"note,omitempty"`
}
