package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// TimerService is what the timer endpoints need.
type TimerService interface {
	Create(ctx context.Context, r api.TimerRequest) (api.Timer, bool, error)
	Get(ctx context.Context, bizType, bizID string) (api.Timer, error)
	Reschedule(ctx context.Context, bizType, bizID string, fireAt time.Time) (api.Timer, error)
	Cancel(ctx context.Context, bizType, bizID string) (api.Timer, error)
	List(ctx context.Context, bizType, state string, pageSize int, token []byte) ([]api.Timer, []byte, error)
}

func (h *handlers) createTimer(c echo.Context) error {
	var req api.TimerRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if err := courier.CheckName("biz_type", req.BizType); err != nil {
		return err
	}
	if err := courier.CheckID("biz_id", req.BizID); err != nil {
		return err
	}
	if _, _, err := req.When.Resolve(time.Now()); err != nil {
		return err // before admission: a malformed request costs no token
	}
	t, created, err := h.d.Timers.Create(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, t)
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handlers) getTimer(c echo.Context) error {
	bizType, bizID, err := timerPath(c)
	if err != nil {
		return err
	}
	t, err := h.d.Timers.Get(c.Request().Context(), bizType, bizID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handlers) rescheduleTimer(c echo.Context) error {
	bizType, bizID, err := timerPath(c)
	if err != nil {
		return err
	}
	var req api.Reschedule
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	at, _, err := req.When.Resolve(time.Now())
	if err != nil {
		return err
	}
	t, err := h.d.Timers.Reschedule(c.Request().Context(), bizType, bizID, at)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handlers) cancelTimer(c echo.Context) error {
	bizType, bizID, err := timerPath(c)
	if err != nil {
		return err
	}
	t, err := h.d.Timers.Cancel(c.Request().Context(), bizType, bizID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

// timerPath reads :biz_type and :biz_id from the path.
func timerPath(c echo.Context) (string, string, error) {
	bizType, err := pathName(c, "biz_type")
	if err != nil {
		return "", "", err
	}
	bizID, err := pathID(c, "biz_id")
	return bizType, bizID, err
}

func (h *handlers) listTimers(c echo.Context) error {
	page, err := h.timerPage(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, page)
}

// timerPage reads the page of timers the request's query asks for (biz_type, state, page_size,
// page_token): the API's list and the console's.
func (h *handlers) timerPage(c echo.Context) (api.TimerPage, error) {
	size := 100
	if v := c.QueryParam("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return api.TimerPage{}, courier.Errorf(courier.CodeInvalid, "page_size must be from 1 to 1000")
		}
		size = n
	}
	bizType, state := c.QueryParam("biz_type"), c.QueryParam("state")
	query := "timers\x00" + bizType + "\x00" + state
	ctx := c.Request().Context()
	token, err := h.pages.open(ctx, query, c.QueryParam("page_token"))
	if err != nil {
		return api.TimerPage{}, err
	}
	items, next, err := h.d.Timers.List(ctx, bizType, state, size, token)
	if err != nil {
		return api.TimerPage{}, err
	}
	if items == nil {
		items = []api.Timer{}
	}
	nextToken, err := h.pages.seal(ctx, query, next)
	if err != nil {
		return api.TimerPage{}, err
	}
	return api.TimerPage{Items: items, NextPageToken: nextToken}, nil
}
