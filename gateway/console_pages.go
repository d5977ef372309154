package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/timers"
)

// What the overview reads, and how far.
const (
	overviewWindow     = 5 * time.Minute // tasks finished "recently"
	overviewTimeout    = 5 * time.Second // each section; a slow one shows as unavailable, the rest still render
	checkTimeout       = 2 * time.Second // each readiness probe
	timerHorizon       = time.Hour       // timers "due soon"
	timerGrace         = time.Minute     // a scheduled timer this far past its fire time is late
	overviewDeadTopics = 10              // topics listed under dead records, per source
	overviewBlocked    = 20              // blocked keys listed, per source
	overviewBizTypes   = 20              // business types counted
	overviewSchedules  = 20              // schedules listed
	unreadable         = "unavailable: " // prefix of a section that could not be read
)

type overviewData struct {
	Window    time.Duration
	Queues    []queueLine
	QueuesErr string
	Outbox    []outboxLine
	Checks    []checkLine
	// Timers counts the business types' timers; TimersMore says only the first
	// overviewBizTypes are counted.
	Timers        []timers.TypeStats
	TimersMore    bool
	TimersErr     string
	HasTimers     bool
	Schedules     []api.Schedule
	SchedulesMore bool
	SchedulesErr  string
	HasSchedules  bool
	// Flow is set when flow control (pause/resume) is available; PausedTopics lists the paused
	// topic patterns and PausedBizTypes the paused business types.
	Flow           bool
	Redeliver      bool // failed timers can be redelivered (the gateway has the timer service)
	FlowErr        string
	PausedTopics   []courier.Pause
	PausedBizTypes []courier.Pause
}

type queueLine struct {
	Name            string
	Pending         [courier.PriorityBands]int64
	Total           int64
	InFlight, Limit int
	Oldest          time.Time
	Succeeded       int64
	Failed          int64
	Paused          bool
	// Mode is the queue's dispatch mode and PushBatch how many attempts one push carries
	// (docs/tasks.md, "Dispatch modes"); Mode is "" when the queue's configuration is unknown.
	Mode      courier.DispatchMode
	PushBatch int
}

type outboxLine struct {
	Source   string
	Overview courier.OutboxOverview
	Err      string
	// Blocked are the source's first blocked keys by key (the ordered mode); BlockedMore says
	// more follow.
	Blocked     []courier.BlockedKey
	BlockedMore bool
	BlockedErr  string
}

// Count is the source's rows in a status.
func (l outboxLine) Count(status string) int64 {
	return l.Overview.ByStatus[courier.OutboxStatus(status)]
}

type checkLine struct {
	Name     string
	OK       bool
	Optional bool
}

// section runs fn with its own deadline, logging a failure and returning what the page shows
// for it ("" when it worked).
func (cs *console) section(ctx context.Context, what string, fn func(ctx context.Context) error) string {
	ctx, cancel := context.WithTimeout(ctx, overviewTimeout)
	defer cancel()
	if err := fn(ctx); err != nil {
		cs.log.WarnContext(ctx, "console overview section unavailable", "section", what, "error", err)
		return unreadable + "could not be read (the gateway's log says why)"
	}
	return ""
}

// overview is the console's first page: every queue's backlog by band, slots and recent
// results; every outbox's backlog, oldest unsent row and dead records by topic; the
// dependencies' health; timers per business type; schedules. Each section is read at once and
// on its own deadline.
func (cs *console) overview(c echo.Context) error {
	ctx := c.Request().Context()
	d := overviewData{Window: overviewWindow, Flow: cs.flow != nil, Redeliver: cs.h.d.Timers != nil}
	var wg sync.WaitGroup
	run := func(fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	paused := courier.NewPauses(nil)
	if cs.flow != nil {
		d.FlowErr = cs.section(ctx, "flow control", func(ctx context.Context) error {
			list, err := cs.flow.List(ctx)
			paused = courier.NewPauses(list)
			for _, p := range list {
				switch p.Kind {
				case courier.PauseTopic:
					d.PausedTopics = append(d.PausedTopics, p)
				case courier.PauseBizType:
					d.PausedBizTypes = append(d.PausedBizTypes, p)
				}
			}
			return err
		})
	}
	run(func() {
		d.QueuesErr = cs.section(ctx, "task queues", func(ctx context.Context) error { return cs.queues(ctx, &d, paused) })
	})
	d.Outbox = cs.outboxSources()
	for i := range d.Outbox {
		run(func() {
			line := &d.Outbox[i]
			st := cs.overviewer(line.Source)
			line.Err = cs.section(ctx, "outbox "+line.Source, func(ctx context.Context) error {
				var err error
				line.Overview, err = st.OutboxOverview(ctx, overviewDeadTopics)
				return err
			})
		})
		run(func() {
			line := &d.Outbox[i]
			st := cs.outboxStore(line.Source)
			if st == nil {
				return
			}
			line.BlockedErr = cs.section(ctx, "blocked keys "+line.Source, func(ctx context.Context) error {
				var err error
				line.Blocked, line.BlockedMore, err = st.BlockedKeys(ctx, "", overviewBlocked)
				return err
			})
		})
	}
	d.Checks = make([]checkLine, len(cs.h.d.Checks))
	for i, chk := range cs.h.d.Checks {
		run(func() {
			pctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			d.Checks[i] = checkLine{Name: chk.Name, OK: chk.Probe(pctx) == nil, Optional: chk.Optional}
		})
	}
	if cs.timers != nil && cs.h.d.BizTypes != nil {
		d.HasTimers = true
		run(func() {
			d.TimersErr = cs.section(ctx, "timers", func(ctx context.Context) error {
				types, err := cs.h.d.BizTypes.ListBizTypes(ctx)
				if err != nil {
					return err
				}
				names := make([]string, 0, len(types))
				for _, t := range types {
					names = append(names, t.Name)
				}
				sort.Strings(names)
				if len(names) > overviewBizTypes {
					names, d.TimersMore = names[:overviewBizTypes], true
				}
				d.Timers, err = cs.timers.TimerStats(ctx, names, time.Now(), timerHorizon, timerGrace)
				return err
			})
		})
	}
	if cs.timers != nil && cs.h.d.Schedules != nil {
		d.HasSchedules = true
		run(func() {
			d.SchedulesErr = cs.section(ctx, "schedules", func(ctx context.Context) error {
				var err error
				d.Schedules, d.SchedulesMore, err = cs.timers.ListSchedules(ctx, overviewSchedules)
				return err
			})
		})
	}
	wg.Wait()
	return cs.view.render(c, http.StatusOK, "overview", consolePage{Title: "Overview", Flash: flashOf(c), Data: d})
}

// queues fills the overview's queue lines: the backlog from the database, the slots from the
// queues' configuration.
func (cs *console) queues(ctx context.Context, d *overviewData, paused courier.Pauses) error {
	if cs.stats == nil {
		return nil
	}
	backlogs, err := cs.stats.QueueBacklogs(ctx, time.Now().Add(-overviewWindow))
	if err != nil {
		return err
	}
	limits := map[string]courier.Queue{}
	if cs.h.d.Tasks != nil {
		qs, err := cs.h.d.Tasks.ListQueues(ctx)
		if err != nil {
			return err
		}
		for _, q := range qs {
			limits[q.Name] = q
		}
	}
	for _, b := range backlogs {
		q := limits[b.Queue]
		d.Queues = append(d.Queues, queueLine{Name: b.Queue, Pending: b.Pending, Total: b.PendingTotal(),
			InFlight: q.InFlight, Limit: q.ConcurrencyLimit, Oldest: b.OldestPending,
			Succeeded: b.Succeeded, Failed: b.Failed, Paused: isPaused(paused.Queue(b.Queue)),
			Mode: q.DispatchMode, PushBatch: q.PushBatchSize})
	}
	return nil
}

func isPaused(_ courier.Pause, ok bool) bool { return ok }

// outboxSources lists the outbox tables the overview can summarise: courier's own first.
func (cs *console) outboxSources() []outboxLine {
	var out []outboxLine
	if cs.overviewer(courier.DefaultSource) != nil {
		out = append(out, outboxLine{Source: courier.DefaultSource})
	}
	names := make([]string, 0, len(cs.h.d.Sources))
	for name := range cs.h.d.Sources {
		if cs.overviewer(name) != nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, outboxLine{Source: n})
	}
	return out
}

func (cs *console) overviewer(source string) outboxOverviewer {
	if source == courier.DefaultSource {
		if cs.stats != nil {
			return cs.stats
		}
		o, _ := cs.h.d.Outbox.(outboxOverviewer)
		return o
	}
	o, _ := cs.h.d.Sources[source].(outboxOverviewer)
	return o
}

// outboxStore is the outbox table of a source, nil if the gateway has none.
func (cs *console) outboxStore(source string) OutboxStore {
	if source == courier.DefaultSource {
		return cs.h.d.Outbox
	}
	return cs.h.d.Sources[source]
}

// sourceNames lists the outbox sources for the list's filter: courier's own first.
func (cs *console) sourceNames() []string {
	names := make([]string, 0, len(cs.h.d.Sources))
	for name := range cs.h.d.Sources {
		names = append(names, name)
	}
	sort.Strings(names)
	return append([]string{courier.DefaultSource}, names...)
}

// bulkFlash words what a bulk action did: done with the count n, skipped (if the action skips
// any) with the count skipped when some were, and more when more match.
func bulkFlash(c echo.Context, done, skipped, more string) string {
	n := func(name string) int {
		v, _ := strconv.Atoi(c.QueryParam(name))
		return max(v, 0)
	}
	s := fmt.Sprintf(done, n("n"))
	if k := n("skipped"); k > 0 && skipped != "" {
		s += fmt.Sprintf(skipped, k)
	}
	if c.QueryParam("more") == "1" {
		s += more
	}
	return s
}

// flashOf is what the last action did, from the fixed messages below; the redirect after an
// action names one by key, so a link can show nothing else.
func flashOf(c echo.Context) string {
	switch c.QueryParam("flash") {
	case "redriven":
		return "Redriven: the record is pending again and the relay delivers it in a moment."
	case "bulk":
		return bulkFlash(c, "Redrove %d dead records.",
			" %d were left dead because their last delivery run was still closing: redrive again in a moment.",
			" More dead records match: redrive again for the next ones.")
	case "skipped":
		return "Skipped: the record stays dead and its key's later records go out."
	case "cancelled":
		return "Cancelled."
	case "cancel-tasks", "retry-tasks":
		done := "Cancelled %d tasks."
		if c.QueryParam("flash") == "retry-tasks" {
			done = "Retried %d tasks: they are pending again with a fresh retry budget."
		}
		return bulkFlash(c, done, " %d had changed meanwhile and were left as they were.",
			" More tasks match: do it again for the next ones.")
	case "paused":
		return "Paused."
	case "resumed":
		return "Resumed."
	case "redelivered":
		return "Redelivered: the timer is delivered again."
	case "redelivered-n":
		return bulkFlash(c, "Redelivered %d failed timers.", "", " More failed timers match: redeliver again for the next ones.")
	}
	return ""
}

type outboxListData struct {
	Page     api.OutboxPage
	Statuses []string
	Source   string
	Status   string
	Topic    string
	Limit    string
	Sources  []string
	Next     string // the next page's token
}

// outboxList is the API's outbox list as a page, with the same filters and paging.
func (cs *console) outboxList(c echo.Context) error {
	page, err := cs.h.outboxPage(c)
	if err != nil {
		return err
	}
	d := outboxListData{Page: page, Statuses: []string{"pending", "dispatched", "sent", "dead"}, Source: c.QueryParam("source"), Status: c.QueryParam("status"), Topic: c.QueryParam("topic"),
		Limit: c.QueryParam("limit"), Sources: cs.sourceNames(), Next: page.NextPageToken}
	return cs.view.render(c, http.StatusOK, "outbox", consolePage{Title: "Outbox", Flash: flashOf(c), Data: d})
}

// outboxRecord shows one record with its payload, headers and last error.
func (cs *console) outboxRecord(c echo.Context) error {
	src, st, id, err := cs.h.record(c)
	if err != nil {
		return err
	}
	rec, err := st.GetOutbox(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return cs.view.render(c, http.StatusOK, "record", consolePage{Title: fmt.Sprintf("Outbox record %d", id), Flash: flashOf(c),
		Data: api.OutboxRecordOf(src, rec)})
}

type taskListData struct {
	Page                 api.TaskPage
	Queue, Status, Prio  string
	Limit, After, Before string
	Statuses             []courier.TaskStatus
	Priorities           []int
	Next                 string
	BulkActions          []string // the bulk actions that apply to the status filtered on: cancel, retry
}

// taskList is the API's task list as a page, with the same filters and paging.
func (cs *console) taskList(c echo.Context) error {
	page, err := cs.h.taskPage(c)
	if err != nil {
		return err
	}
	prios := make([]int, courier.PriorityBands)
	for i := range prios {
		prios[i] = i + 1
	}
	d := taskListData{Page: page, Queue: c.QueryParam("queue"), Status: c.QueryParam("status"), Prio: c.QueryParam("priority"),
		Limit: c.QueryParam("limit"), After: c.QueryParam("created_after"), Before: c.QueryParam("created_before"),
		Statuses: courier.TaskStatuses, Next: page.NextPageToken, Priorities: prios}
	st := courier.TaskStatus(d.Status)
	if st == "" || slices.Contains(courier.TaskCancellable, st) {
		d.BulkActions = append(d.BulkActions, "cancel")
	}
	if st == "" || slices.Contains(courier.TaskRetryable, st) {
		d.BulkActions = append(d.BulkActions, "retry")
	}
	return cs.view.render(c, http.StatusOK, "tasks", consolePage{Title: "Tasks", Flash: flashOf(c), Data: d})
}

// taskDetail shows one task version with its payload, result and message.
func (cs *console) taskDetail(c echo.Context) error {
	id, _, t, err := readAt(c, taskPath, cs.h.d.Tasks.Get)
	if err != nil {
		return err
	}
	return cs.view.render(c, http.StatusOK, "task", consolePage{Title: "Task " + id, Flash: flashOf(c), Data: api.TaskOf(t)})
}

type timerListData struct {
	Page                 api.TimerPage
	BizType, State, Size string
	States               []courier.TimerState
	Next                 string
	Redeliver            bool // failed timers can be redelivered (the gateway has the timer service)
}

// timerData is a timer's page.
type timerData struct {
	api.Timer
	Redeliver bool
}

// timerList is the API's timer list as a page, with the same filters and paging.
func (cs *console) timerList(c echo.Context) error {
	page, err := cs.h.timerPage(c)
	if err != nil {
		return err
	}
	d := timerListData{Page: page, BizType: c.QueryParam("biz_type"), State: c.QueryParam("state"), Size: c.QueryParam("limit"),
		States: courier.TimerStates, Next: page.NextPageToken, Redeliver: cs.h.d.Timers != nil}
	return cs.view.render(c, http.StatusOK, "timers", consolePage{Title: "Timers", Flash: flashOf(c), Data: d})
}

// timerDetail shows one timer with its attempts, last error and payload.
func (cs *console) timerDetail(c echo.Context) error {
	_, bizID, t, err := readAt(c, timerPath, cs.h.d.Timers.Get)
	if err != nil {
		return err
	}
	return cs.view.render(c, http.StatusOK, "timer", consolePage{Title: "Timer " + bizID, Flash: flashOf(c),
		Data: timerData{Timer: t, Redeliver: cs.h.d.Timers != nil}})
}
