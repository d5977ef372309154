package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/timers"
)

// The console's actions. Each is a POST carrying the session's CSRF token, needs the admin
// scope, calls the same code as its API route, logs who did it, and answers with a redirect to
// the page that shows the result (post/redirect/get), so a reload never repeats it.

func (cs *console) audit(c echo.Context, action string, args ...any) {
	v := viewerOf(c)
	cs.log.InfoContext(c.Request().Context(), "console action", append([]any{"action", action, "key_id", v.Key.ID}, args...)...)
}

func seeOther(c echo.Context, path string, kv ...string) error {
	u, err := consoleLink(path, kv...)
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, string(u))
}

// redriveRecord redrives one record, like POST /v1/outbox/{id}/redrive (?source= names a
// producer's database).
func (cs *console) redriveRecord(c echo.Context) error {
	src, st, id, err := cs.h.record(c)
	if err != nil {
		return err
	}
	if _, err := cs.h.redriveRecord(c.Request().Context(), src, st, id); err != nil {
		return err
	}
	cs.audit(c, "redrive", "source", src, "id", id)
	source := src
	if source == courier.DefaultSource {
		source = ""
	}
	return seeOther(c, "/console/outbox/"+strconv.FormatInt(id, 10), "source", source, "flash", "redriven")
}

// skipRecord skips the dead record a blocked key waits on, like POST /v1/outbox/{id}/skip
// (?source= names a producer's database): form field confirm. The record stays dead and the
// key's later records go out.
func (cs *console) skipRecord(c echo.Context) error {
	src, st, id, err := cs.h.record(c)
	if err != nil {
		return err
	}
	if c.Request().PostForm.Get("confirm") != "yes" {
		return &courier.Error{Code: courier.CodeValidation, Message: "tick the confirmation to skip the record: it stays dead and its key's later records go out",
			Details: map[string]any{"field": "confirm"}}
	}
	b, err := cs.h.skipRecord(c.Request().Context(), st, id)
	if err != nil {
		return err
	}
	cs.audit(c, "skip", "source", src, "id", id, "key", b.Key)
	return seeOther(c, "/console", "flash", "skipped")
}

// redriveDead redrives the dead records a topic pattern matches, like POST /v1/outbox/redrive:
// form fields source, topic (a pattern), max (default the API's), and confirm.
func (cs *console) redriveDead(c echo.Context) error {
	form := c.Request().PostForm
	req := api.RedriveFilter{Source: form.Get("source"), Topic: strings.TrimSpace(form.Get("topic"))}
	if raw := strings.TrimSpace(form.Get("max")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil {
			return &courier.Error{Code: courier.CodeInvalid, Message: "max must be a whole number", Details: map[string]any{"field": "max"}}
		}
		req.Max = &n
	}
	if form.Get("confirm") != "yes" {
		return &courier.Error{Code: courier.CodeValidation, Message: "tick the confirmation to redrive every matching dead record",
			Details: map[string]any{"field": "confirm"}}
	}
	res, err := cs.h.redriveDead(c.Request().Context(), req)
	if err != nil {
		return err
	}
	cs.audit(c, "redrive-dead", "source", req.Source, "topic", req.Topic, "done", res.Done, "skipped", res.Skipped)
	more := ""
	if res.More {
		more = "1"
	}
	source := req.Source
	if source == courier.DefaultSource {
		source = ""
	}
	topic := req.Topic // the list filters by one topic, not a pattern
	if courier.CheckTopic("topic", topic) != nil {
		topic = ""
	}
	return seeOther(c, "/console/outbox", "source", source, "status", string(courier.OutboxDead), "topic", topic,
		"flash", "bulk", "n", strconv.Itoa(res.Done), "skipped", strconv.Itoa(res.Skipped), "more", more)
}

// cancelTask cancels a task version, like DELETE /v1/tasks/{task_id}/versions/{version}.
func (cs *console) cancelTask(c echo.Context) error {
	id, v, err := taskPath(c)
	if err != nil {
		return err
	}
	if _, err := cs.h.d.Tasks.Cancel(c.Request().Context(), id, v); err != nil {
		return err
	}
	cs.audit(c, "cancel-task", "task_id", id, "version", v)
	return seeOther(c, "/console/tasks/"+url.PathEscape(id)+"/versions/"+strconv.FormatInt(v, 10), "flash", "cancelled")
}

// bulkTasks cancels (or, with retry, retries) the tasks the list's filter matches, like POST
// /v1/tasks/bulk/cancel and /retry: form fields queue, status, priority, created_after,
// created_before (the list's), max (default the API's), and confirm.
func (cs *console) bulkTasks(retry bool) echo.HandlerFunc {
	return func(c echo.Context) error {
		form := c.Request().PostForm
		req := api.TaskBulkFilter{Queue: strings.TrimSpace(form.Get("queue")), Status: courier.TaskStatus(form.Get("status"))}
		num := func(field string) (*int, error) {
			raw := strings.TrimSpace(form.Get(field))
			if raw == "" {
				return nil, nil
			}
			n, err := strconv.Atoi(raw)
			if err != nil {
				return nil, &courier.Error{Code: courier.CodeInvalid, Message: field + " must be a whole number", Details: map[string]any{"field": field}}
			}
			return &n, nil
		}
		instant := func(field string) (*time.Time, error) {
			raw := strings.TrimSpace(form.Get(field))
			if raw == "" {
				return nil, nil
			}
			t, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				return nil, &courier.Error{Code: courier.CodeInvalid, Message: field + " must be an RFC 3339 time such as 2026-01-02T15:04:05Z",
					Details: map[string]any{"field": field}}
			}
			return &t, nil
		}
		prio, err := num("priority")
		if err != nil {
			return err
		}
		if prio != nil {
			req.Priority = *prio
		}
		if req.Max, err = num("max"); err != nil {
			return err
		}
		if req.CreatedAfter, err = instant("created_after"); err != nil {
			return err
		}
		if req.CreatedBefore, err = instant("created_before"); err != nil {
			return err
		}
		action, verb := "cancel-tasks", "cancel"
		if retry {
			action, verb = "retry-tasks", "retry"
		}
		if form.Get("confirm") != "yes" {
			return &courier.Error{Code: courier.CodeValidation, Message: "tick the confirmation to " + verb + " every matching task",
				Details: map[string]any{"field": "confirm"}}
		}
		f, max, err := checkTaskBulk(req)
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		var res courier.TaskBulkResult
		if retry {
			res, err = cs.h.d.Tasks.RetryMatching(ctx, f, max)
		} else {
			res, err = cs.h.d.Tasks.CancelMatching(ctx, f, max)
		}
		if err != nil {
			return err
		}
		cs.audit(c, action, "queue", req.Queue, "status", string(req.Status), "priority", req.Priority,
			"created_after", form.Get("created_after"), "created_before", form.Get("created_before"),
			"done", res.Affected, "skipped", res.Skipped, "more", res.More)
		more := ""
		if res.More {
			more = "1"
		}
		return seeOther(c, "/console/tasks", "queue", req.Queue, "status", string(req.Status), "priority", form.Get("priority"),
			"created_after", form.Get("created_after"), "created_before", form.Get("created_before"),
			"flash", action, "n", strconv.Itoa(res.Affected), "skipped", strconv.Itoa(res.Skipped), "more", more)
	}
}

// cancelTimer cancels a timer, like DELETE /v1/timers/{biz_type}/{biz_id}.
func (cs *console) cancelTimer(c echo.Context) error {
	return cs.timerAction(c, cs.h.d.Timers.Cancel, "cancel-timer", "cancelled")
}

// timerAction runs do on the timer the path names, audits it as action and shows the timer with
// flash.
func (cs *console) timerAction(c echo.Context, do timerFunc, action, flash string) error {
	bizType, bizID, err := timerPath(c)
	if err != nil {
		return err
	}
	if _, err := do(c.Request().Context(), bizType, bizID); err != nil {
		return err
	}
	cs.audit(c, action, "biz_type", bizType, "biz_id", bizID)
	return seeOther(c, "/console/timers/"+url.PathEscape(bizType)+"/"+url.PathEscape(bizID), "flash", flash)
}

// pauseSchedule and unpauseSchedule are POST /v1/schedules/{id}/pause and /unpause.
func (cs *console) pauseSchedule(c echo.Context) error   { return cs.scheduleState(c, true) }
func (cs *console) unpauseSchedule(c echo.Context) error { return cs.scheduleState(c, false) }

func (cs *console) scheduleState(c echo.Context, pause bool) error {
	id, err := pathID(c, "id")
	if err != nil {
		return err
	}
	v := viewerOf(c)
	ctx := c.Request().Context()
	flash := "resumed"
	if pause {
		err = cs.h.d.Schedules.PauseSchedule(ctx, id, fmt.Sprintf("paused in the console (API key %s)", v.Key.ID))
		flash = "paused"
	} else {
		err = cs.h.d.Schedules.UnpauseSchedule(ctx, id, fmt.Sprintf("resumed in the console (API key %s)", v.Key.ID))
	}
	if err != nil {
		return err
	}
	cs.audit(c, flash+"-schedule", "schedule_id", id)
	return seeOther(c, "/console", "flash", flash)
}

// pause and resume are flow control's (Deps.Pauses): form fields kind (queue, biz_type,
// topic), name and, to pause, reason.
func (cs *console) pause(c echo.Context) error  { return cs.flowAction(c, true) }
func (cs *console) resume(c echo.Context) error { return cs.flowAction(c, false) }

func (cs *console) flowAction(c echo.Context, pause bool) error {
	form := c.Request().PostForm
	p := courier.Pause{Kind: courier.PauseKind(form.Get("kind")), Name: form.Get("name"), Reason: form.Get("reason"),
		PausedBy: "console, " + keyName(viewerOf(c).Key)}
	if err := courier.CheckPause(p.Kind, p.Name, p.Reason); err != nil {
		return err
	}
	ctx := c.Request().Context()
	flash := "paused"
	var err error
	if pause {
		_, _, err = cs.flow.Pause(ctx, p)
	} else {
		_, err = cs.flow.Resume(ctx, p.Kind, p.Name)
		flash = "resumed"
	}
	if err != nil {
		return err
	}
	cs.audit(c, flash, "kind", string(p.Kind), "name", p.Name)
	return seeOther(c, "/console", "flash", flash)
}

// redeliverTimer delivers one failed timer again.
func (cs *console) redeliverTimer(c echo.Context) error {
	return cs.timerAction(c, cs.h.d.Timers.Redeliver, "redeliver-timer", "redelivered")
}

// redeliverFailed delivers a business type's failed timers again: form field biz_type.
func (cs *console) redeliverFailed(c echo.Context) error {
	bizType := c.Request().PostForm.Get("biz_type")
	if err := courier.CheckName("biz_type", bizType); err != nil {
		return err
	}
	if c.Request().PostForm.Get("confirm") != "yes" {
		return &courier.Error{Code: courier.CodeValidation, Message: "tick the confirmation to redeliver every failed timer of the type",
			Details: map[string]any{"field": "confirm"}}
	}
	res, err := cs.h.d.Timers.RedeliverFailed(c.Request().Context(), timers.RedeliverQuery{BizType: bizType, Max: timers.MaxRedeliver})
	if err != nil {
		return err
	}
	cs.audit(c, "redeliver-failed-timers", "biz_type", bizType, "done", res.Redelivered)
	more := "0"
	if res.More {
		more = "1"
	}
	return seeOther(c, "/console", "flash", "redelivered-n", "n", strconv.Itoa(res.Redelivered), "more", more)
}
