package gateway

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier/api"
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
}

func (h *handlers) createSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var sp api.ScheduleSpec
	if err := bindJSON(c, &sp); err != nil {
		return err
	}
	out, err := h.d.Schedules.CreateSchedule(c.Request().Context(), id, sp)
	if err != nil {
		return err
	}
	if out, err = h.scheduleShown(c.Request().Context(), out); err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, out)
}

func (h *handlers) getSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	out, err := h.d.Schedules.GetSchedule(c.Request().Context(), id)
	if err != nil {
		return err
	}
	if out, err = h.scheduleShown(c.Request().Context(), out); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) updateSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	var sp api.ScheduleSpec
	if err := bindJSON(c, &sp); err != nil {
		return err
	}
	out, err := h.d.Schedules.UpdateSchedule(c.Request().Context(), id, sp)
	if err != nil {
		return err
	}
	if out, err = h.scheduleShown(c.Request().Context(), out); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, out)
}

func (h *handlers) deleteSchedule(c echo.Context) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	if err := h.d.Schedules.DeleteSchedule(c.Request().Context(), id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
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
