package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/timers"
)

// ScheduleService is what the schedule endpoints need.
type ScheduleService interface {
	CreateSchedule(ctx context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error)
	GetSchedule(ctx context.Context, id string) (api.Schedule, error)
	UpdateSchedule(ctx context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error)
	DeleteSchedule(ctx context.Context, id string) error
	PauseSchedule(ctx context.Context, id, note string) error
	UnpauseSchedule(ctx context.Context, id, note string) error
	TriggerSchedule(ctx context.Context, id string) error
	// ListSchedulePage reads one page of schedules and the next page's token (nil: the last).
	ListSchedulePage(ctx context.Context, q timers.ScheduleQuery, token []byte) ([]api.Schedule, []byte, error)
}

// putSchedule creates (201) or replaces (200) a schedule, as PUT does for every named
// resource (docs/api.md, "Verbs"). With If-None-Match: * it only creates: an existing id is
// 409.
func (h *handlers) putSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	createOnly := false
	switch inm := strings.TrimSpace(c.Request().Header.Get("If-None-Match")); inm {
	case "":
	case "*":
		createOnly = true
	default:
		return &courier.Error{Code: courier.CodeInvalid, Message: `If-None-Match takes only "*" (create, never replace)`,
			Details: map[string]any{"field": "If-None-Match"}}
	}
	var sp api.ScheduleSpec
	if err := bindJSON(c, &sp); err != nil {
		return err
	}
	ctx := c.Request().Context()
	status := http.StatusCreated
	out, err := h.d.Schedules.CreateSchedule(ctx, id, sp)
	if courier.ErrorCode(err) == courier.CodeConflict && !createOnly {
		status = http.StatusOK
		out, err = h.d.Schedules.UpdateSchedule(ctx, id, sp)
	}
	if err != nil {
		return err
	}
	if out, err = h.scheduleShown(ctx, out); err != nil {
		return err
	}
	return c.JSON(status, out)
}

// listSchedules pages through the schedules (biz_type, paused, limit, page_token), with a
// page token sealed to the query like a timer list's.
func (h *handlers) listSchedules(c echo.Context) error {
	var q timers.ScheduleQuery
	var err error
	if q.Limit, err = queryLimit(c); err != nil {
		return err
	}
	if q.BizType = c.QueryParam("biz_type"); q.BizType != "" {
		if err := courier.CheckName("biz_type", q.BizType); err != nil {
			return err
		}
	}
	if raw := c.QueryParam("paused"); raw != "" {
		p, err := queryBool(c, "paused")
		if err != nil {
			return err
		}
		q.Paused = &p
	}
	query := strings.Join([]string{"schedules", q.BizType, c.QueryParam("paused")}, "\x00")
	ctx := c.Request().Context()
	token, err := h.pages.open(ctx, query, c.QueryParam("page_token"))
	if err != nil {
		return err
	}
	items, next, err := h.d.Schedules.ListSchedulePage(ctx, q, token)
	if err != nil {
		return err
	}
	if items == nil {
		items = []api.Schedule{}
	}
	for i := range items {
		if items[i], err = h.scheduleShown(ctx, items[i]); err != nil {
			return err
		}
	}
	nextToken, err := h.pages.seal(ctx, query, next)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.SchedulePage{Items: items, NextPageToken: nextToken})
}

func (h *handlers) getSchedule(c echo.Context) error {
	return getOne(c, pathID, "id", h.d.Schedules.GetSchedule, h.scheduleShown)
}

func (h *handlers) deleteSchedule(c echo.Context) error {
	return deleteOne(c, pathID, "id", h.d.Schedules.DeleteSchedule)
}

func (h *handlers) scheduleAction(act func(ctx context.Context, id, note string) error) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := pathID(c, "id")
		if err != nil {
			return err
		}
		var n api.ScheduleNote
		if err := bindOptionalJSON(c, &n); err != nil {
			return err
		}
		if err := act(c.Request().Context(), id, n.Note); err != nil {
			return err
		}
		return h.getSchedule(c)
	}
}

// scheduleShown is a schedule as the API shows it: with its business type's pause, if any.
func (h *handlers) scheduleShown(ctx context.Context, sc api.Schedule) (api.Schedule, error) {
	ps, err := h.pauses(ctx)
	if err != nil {
		return api.Schedule{}, err
	}
	sc.BizTypePaused = api.PausedBy(ps.BizType(sc.Spec.BizType))
	return sc, nil
}
