package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/timers"
)

// TimerService is what the timer endpoints need.
type TimerService interface {
	Create(ctx context.Context, r api.TimerRequest) (api.Timer, bool, error)
	CreateBatch(ctx context.Context, reqs []api.TimerRequest) ([]timers.BatchResult, error)
	Get(ctx context.Context, bizType, bizID string) (api.Timer, error)
	Reschedule(ctx context.Context, bizType, bizID string, fireAt time.Time) (api.Timer, error)
	Cancel(ctx context.Context, bizType, bizID string) (api.Timer, error)
	List(ctx context.Context, q timers.ListQuery, token []byte) ([]api.Timer, []byte, error)
	Redeliver(ctx context.Context, bizType, bizID string) (api.Timer, error)
	RedeliverFailed(ctx context.Context, q timers.RedeliverQuery) (timers.RedeliverResult, error)
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
	if t, err = h.timerShown(c.Request().Context(), t); err != nil {
		return err
	}
	if created {
		return c.JSON(http.StatusCreated, t)
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handlers) getTimer(c echo.Context) error {
	return answerTimer(c, http.StatusOK, h.shown(h.d.Timers.Get))
}

func (h *handlers) rescheduleTimer(c echo.Context) error {
	return answerTimer(c, http.StatusOK, h.shown(func(ctx context.Context, bizType, bizID string) (api.Timer, error) {
		var req api.Reschedule
		if err := bindJSON(c, &req); err != nil {
			return api.Timer{}, err
		}
		at, _, err := req.When.Resolve(time.Now())
		if err != nil {
			return api.Timer{}, err
		}
		return h.d.Timers.Reschedule(ctx, bizType, bizID, at)
	}))
}

// timerFunc reads or changes one timer.
type timerFunc = func(ctx context.Context, bizType, bizID string) (api.Timer, error)

// shown is do with its timer as the API shows it (timerShown).
func (h *handlers) shown(do timerFunc) timerFunc {
	return func(ctx context.Context, bizType, bizID string) (api.Timer, error) {
		t, err := do(ctx, bizType, bizID)
		if err != nil {
			return api.Timer{}, err
		}
		return h.timerShown(ctx, t)
	}
}

func (h *handlers) cancelTimer(c echo.Context) error {
	return answerTimer(c, http.StatusOK, h.d.Timers.Cancel)
}

// answerTimer runs do on the timer the path names and answers the timer it returns with status.
func answerTimer(c echo.Context, status int, do timerFunc) error {
	return answerAt(c, status, timerPath, do)
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

func (h *handlers) listTimers(c echo.Context) error { return answerPage(c, h.timerPage) }

// timerPage reads the page of timers the request's query asks for (biz_type, state,
// finished_after, finished_before, limit, page_token; page_size, limit's old name, is refused):
// the API's list and the console's.
func (h *handlers) timerPage(c echo.Context) (api.TimerPage, error) {
	var q timers.ListQuery
	var err error
	if err = refuseRenamed(c, "page_size", "limit"); err != nil {
		return api.TimerPage{}, err
	}
	if q.PageSize, err = queryLimit(c); err != nil {
		return api.TimerPage{}, err
	}
	q.BizType, q.State = c.QueryParam("biz_type"), courier.TimerState(c.QueryParam("state"))
	if q.FinishedAfter, err = queryTime(c, "finished_after"); err != nil {
		return api.TimerPage{}, err
	}
	if q.FinishedBefore, err = queryTime(c, "finished_before"); err != nil {
		return api.TimerPage{}, err
	}
	query := strings.Join([]string{"timers", q.BizType, string(q.State), c.QueryParam("finished_after"), c.QueryParam("finished_before")}, "\x00")
	ctx := c.Request().Context()
	token, err := h.pages.open(ctx, query, c.QueryParam("page_token"))
	if err != nil {
		return api.TimerPage{}, err
	}
	items, next, err := h.d.Timers.List(ctx, q, token)
	if err != nil {
		return api.TimerPage{}, err
	}
	if items == nil {
		items = []api.Timer{}
	}
	ps, err := h.pauses(ctx)
	if err != nil {
		return api.TimerPage{}, err
	}
	for i := range items {
		items[i] = timerPaused(ps, items[i])
	}
	nextToken, err := h.pages.seal(ctx, query, next)
	if err != nil {
		return api.TimerPage{}, err
	}
	return api.TimerPage{Items: items, NextPageToken: nextToken}, nil
}

// timerShown is a timer as the API shows it: with its business type's pause while it waits
// for its delivery.
func (h *handlers) timerShown(ctx context.Context, t api.Timer) (api.Timer, error) {
	ps, err := h.pauses(ctx)
	if err != nil {
		return api.Timer{}, err
	}
	return timerPaused(ps, t), nil
}

func timerPaused(ps courier.Pauses, t api.Timer) api.Timer {
	if t.State == courier.TimerScheduled || t.State == courier.TimerFiring {
		t.Paused = api.PausedBy(ps.BizType(t.BizType))
	}
	return t
}

// createTimers arms up to timers.MaxBatch timers in one request, each answered on its own.
func (h *handlers) createTimers(c echo.Context) error {
	var req api.TimerBatch
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	switch {
	case len(req.Timers) == 0:
		return &courier.Error{Code: courier.CodeValidation, Message: "timers must list at least one timer", Details: map[string]any{"field": "timers"}}
	case len(req.Timers) > timers.MaxBatch:
		return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("timers may list at most %d timers", timers.MaxBatch),
			Details: map[string]any{"field": "timers", "limit": timers.MaxBatch}}
	}
	res, err := h.d.Timers.CreateBatch(c.Request().Context(), req.Timers)
	if err != nil {
		return err
	}
	out := api.TimerBatchResult{Items: make([]api.TimerBatchItem, len(res))}
	for i, r := range res {
		item := api.TimerBatchItem{Index: i}
		switch {
		case r.Err != nil:
			status, body := render(r.Err)
			detail := body.Error
			item.Status, item.Outcome, item.Error = status, api.BatchRefused, &detail
			out.Refused++
		case r.Created:
			t := r.Timer
			item.Status, item.Outcome, item.Timer = http.StatusCreated, api.BatchCreated, &t
			out.Created++
		default:
			t := r.Timer
			item.Status, item.Outcome, item.Timer = http.StatusOK, api.BatchExisting, &t
			out.Existing++
		}
		out.Items[i] = item
	}
	return c.JSON(http.StatusOK, out)
}

// redeliverTimer delivers a failed timer again.
func (h *handlers) redeliverTimer(c echo.Context) error {
	return answerTimer(c, http.StatusAccepted, h.d.Timers.Redeliver)
}

// redeliverTimers delivers again the failed timers of a business type a filter selects.
func (h *handlers) redeliverTimers(c echo.Context) error {
	var req api.TimerRedeliverFilter
	if err := bindJSON(c, &req); err != nil {
		return err
	}
	q := timers.RedeliverQuery{BizType: req.BizType}
	if req.FailedAfter != nil {
		q.FailedAfter = *req.FailedAfter
	}
	if req.FailedBefore != nil {
		q.FailedBefore = *req.FailedBefore
	}
	if req.Max != nil {
		if *req.Max < 1 {
			return &courier.Error{Code: courier.CodeValidation, Message: fmt.Sprintf("max must be from 1 to %d", timers.MaxRedeliver),
				Details: map[string]any{"field": "max"}}
		}
		q.Max = *req.Max
	}
	res, err := h.d.Timers.RedeliverFailed(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.NewTimerRedeliverResult(res.Redelivered, res.Skipped, res.More))
}
