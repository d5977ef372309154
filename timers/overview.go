package timers

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// TypeStats counts one business type's timers by what an operator watches: what fires
// soon, what is late, what is being delivered and what failed.
type TypeStats struct {
	BizType string
	DueSoon int64 // scheduled to fire within the horizon asked (the console: the next hour)
	Overdue int64 // still scheduled although their fire time passed more than the grace asked
	Firing  int64 // fired and being delivered (retries included)
	Failed  int64 // delivery failed for good
}

// statsParallel bounds the count queries one TimerStats call has in flight.
const statsParallel = 4

// TimerStats counts, for each business type, its timers due within horizon of now, those still
// scheduled more than grace after their fire time (late), those firing and those failed, from
// Temporal's visibility store (four counts per type, a few at a time).
func (s *Service) TimerStats(ctx context.Context, bizTypes []string, now time.Time, horizon, grace time.Duration) ([]TypeStats, error) {
	out := make([]TypeStats, len(bizTypes))
	type job struct {
		n     *int64
		query string
	}
	var jobs []job
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	for i, bt := range bizTypes {
		if err := courier.CheckName("biz_type", bt); err != nil {
			return nil, err
		}
		out[i].BizType = bt
		base := fmt.Sprintf("%s AND %s = '%s' AND ", timerQuery, courier.SABizType, bt)
		scheduled := base + fmt.Sprintf("%s = '%s' AND ", courier.SAState, courier.TimerScheduled)
		jobs = append(jobs,
			job{&out[i].DueSoon, scheduled + fmt.Sprintf("%s BETWEEN '%s' AND '%s'", courier.SAFireAt, at(now), at(now.Add(horizon)))},
			job{&out[i].Overdue, scheduled + fmt.Sprintf("%s < '%s'", courier.SAFireAt, at(now.Add(-grace)))},
			job{&out[i].Firing, base + fmt.Sprintf("%s = '%s'", courier.SAState, courier.TimerFiring)},
			job{&out[i].Failed, base + fmt.Sprintf("%s = '%s'", courier.SAState, courier.TimerFailed)},
		)
	}
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, statsParallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.namespace, Query: j.query})
			if err != nil {
				errs[i] = err
				return
			}
			*j.n = resp.GetCount()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ListSchedules returns up to limit of courier's schedules (those created through the API;
// courier's own sweeper schedule is not one) with their state and next runs, and whether more
// exist. A list entry carries no spec (the business type and payload are in the scheduled
// action, which only GetSchedule reads), so Spec is empty but for Paused, and RecentRuns too.
func (s *Service) ListSchedules(ctx context.Context, limit int) ([]api.Schedule, bool, error) {
	it, err := s.tc.ScheduleClient().List(ctx, client.ScheduleListOptions{PageSize: limit + 1})
	if err != nil {
		return nil, false, err
	}
	var out []api.Schedule
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, false, err
		}
		esc, ok := strings.CutPrefix(e.ID, "schedule/")
		if !ok {
			continue
		}
		id, err := url.PathUnescape(esc)
		if err != nil {
			continue // not an id courier escaped
		}
		if len(out) == limit {
			return out, true, nil
		}
		sc := api.Schedule{ID: id, Mode: string(courier.TimerModeWorkflow), Paused: e.Paused, Note: e.Note, NextRuns: e.NextActionTimes, RecentRuns: []time.Time{}}
		sc.Spec.Paused = sc.Paused
		if sc.NextRuns == nil {
			sc.NextRuns = []time.Time{}
		}
		out = append(out, sc)
	}
	if len(out) < limit {
		// Then the schedules on the timer wheel.
		wheel, next, err := s.listWheelPage(ctx, ScheduleQuery{Limit: limit - len(out)}, "")
		if err != nil {
			return nil, false, err
		}
		return append(out, wheel...), next != nil, nil
	}
	return out, false, nil
}
