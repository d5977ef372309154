package api

import (
	"time"

	"github.com/courier-oss/courier"
)

// PauseRequest is the body of POST /v1/pauses (scope admin): hold a task queue, a business
// type or the outbox records of a topic pattern (docs/flow-control.md).
type PauseRequest struct {
	Kind   courier.PauseKind `json:"kind"`             // "queue", "biz_type" or "topic"
	Name   string            `json:"name"`             // the queue's or type's name, or a topic pattern ("orders.>")
	Reason string            `json:"reason,omitempty"` // shown wherever the pause is
}

// Pause is a pause in force, as the API shows it: in GET /v1/pauses, in the answers of pause
// and resume, and as "paused" in the queue, business type, task, timer or outbox record it
// holds.
type Pause struct {
	Kind     courier.PauseKind `json:"kind"`
	Name     string            `json:"name"`
	Reason   string            `json:"reason"`
	PausedBy string            `json:"paused_by"`
	PausedAt time.Time         `json:"paused_at"`
}

// PauseOf is p as the API shows it.
func PauseOf(p courier.Pause) Pause {
	return Pause{Kind: p.Kind, Name: p.Name, Reason: p.Reason, PausedBy: p.PausedBy, PausedAt: p.PausedAt}
}

// PausedBy is the "paused" field of an item its pause holds; nil when none does.
func PausedBy(p courier.Pause, ok bool) *Pause {
	if !ok {
		return nil
	}
	out := PauseOf(p)
	return &out
}
