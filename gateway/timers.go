package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/timers"
)

// TimerService is what the timer endpoints need.
type TimerService interface {
	Create(ctx context.Context, r timers.CreateRequest) (timers.Timer, bool, error)
	Get(ctx context.Context, bizType, bizID string) (timers.Timer, error)
	Reschedule(ctx context.Context, bizType, bizID string, fireAt time.Time) (timers.Timer, error)
	Cancel(ctx context.Context, bizType, bizID string) (timers.Timer, error)
	List(ctx context.Context, bizType, state string, pageSize int, token []byte) ([]timers.Timer, []byte, error)
}

// TimerRequest is the body of POST /v1/timers; give fire_at (RFC 3339) or delay ("30m"). A
// repeat of a delay request (same delay and payload) is the same request, whenever it arrives.
type TimerRequest struct {
	BizType string          `json:"biz_type"`
	BizID   string          `json:"biz_id"`
	FireAt  *time.Time      `json:"fire_at"`
	Delay   string          `json:"delay"`
	Payload json.RawMessage `json:"payload"`
}

// RescheduleBody is the body of PATCH /v1/timers/{biz_type}/{biz_id}.
type RescheduleBody struct {
	FireAt *time.Time `json:"fire_at"`
	Delay  string     `json:"delay"`
}

// parseDelay reads a request's delay ("30m"); nil when absent.
func parseDelay(fireAt *time.Time, delay string) (*time.Duration, error) {
	switch {
	case fireAt != nil && delay != "":
		return nil, &courier.Error{Code: courier.CodeValidation, Message: "give fire_at or delay, not both"}
	case delay == "":
		if fireAt == nil {
			return nil, &courier.Error{Code: courier.CodeValidation, Message: "fire_at or delay is required", Details: map[string]any{"field": "fire_at"}}
		}
		return nil, nil
	}
	d, err := time.ParseDuration(delay)
	if err != nil || d < 0 {
		return nil, &courier.Error{Code: courier.CodeValidation, Message: "delay must be a non-negative duration such as \"30m\"",
			Details: map[string]any{"field": "delay"}}
	}
	return &d, nil
}

func fireTime(fireAt *time.Time, delay string) (time.Time, error) {
	d, err := parseDelay(fireAt, delay)
	switch {
	case err != nil:
		return time.Time{}, err
	case d != nil:
		return time.Now().Add(*d), nil
	}
	return *fireAt, nil
}

func (h *handlers) createTimer(c echo.Context) error {
	var req TimerRequest
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	if err := courier.CheckName("biz_type", req.BizType); err != nil {
		return err
	}
	if err := courier.CheckID("biz_id", req.BizID); err != nil {
		return err
	}
	delay, err := parseDelay(req.FireAt, req.Delay)
	if err != nil {
		return err
	}
	r := timers.CreateRequest{BizType: req.BizType, BizID: req.BizID, Delay: delay, Payload: req.Payload}
	if req.FireAt != nil {
		r.FireAt = *req.FireAt
	}
	t, created, err := h.d.Timers.Create(c.Request().Context(), r)
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
	var req RescheduleBody
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	at, err := fireTime(req.FireAt, req.Delay)
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
	size := 100
	if v := c.QueryParam("page_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return courier.Errorf(courier.CodeInvalid, "page_size must be from 1 to 1000")
		}
		size = n
	}
	bizType, state := c.QueryParam("biz_type"), c.QueryParam("state")
	query := "timers\x00" + bizType + "\x00" + state
	ctx := c.Request().Context()
	token, err := h.pages.open(ctx, query, c.QueryParam("page_token"))
	if err != nil {
		return err
	}
	items, next, err := h.d.Timers.List(ctx, bizType, state, size, token)
	if err != nil {
		return err
	}
	if items == nil {
		items = []timers.Timer{}
	}
	nextToken, err := h.pages.seal(ctx, query, next)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"items": items, "next_page_token": nextToken})
}
