package timers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/workflows"
)

var overlapPolicies = map[string]enumspb.ScheduleOverlapPolicy{
	"":                enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	"skip":            enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	"buffer_one":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	"buffer_all":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	"cancel_other":    enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	"terminate_other": enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER,
	"allow_all":       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

func (s *Service) compile(ctx context.Context, id string, sp api.ScheduleSpec) (client.ScheduleSpec, *client.ScheduleWorkflowAction, client.SchedulePolicies, error) {
	var spec client.ScheduleSpec
	var pol client.SchedulePolicies
	if err := courier.CheckID("id", id); err != nil {
		return spec, nil, pol, err
	}
	if err := courier.CheckName("biz_type", sp.BizType); err != nil {
		return spec, nil, pol, err
	}
	if _, err := s.types.GetBizType(ctx, sp.BizType); err != nil {
		if courier.ErrorCode(err) == courier.CodeNotFound {
			return spec, nil, pol, validation("biz_type", "business type %q is not configured", sp.BizType)
		}
		return spec, nil, pol, err
	}
	switch {
	case (sp.Cron == "") == (sp.Interval == 0):
		return spec, nil, pol, validation("cron", "give cron or interval, exactly one")
	case sp.Cron != "":
		if len(strings.Fields(sp.Cron)) < 5 {
			return spec, nil, pol, validation("cron", "cron needs five fields: minute hour day-of-month month day-of-week")
		}
		spec.CronExpressions = []string{sp.Cron}
	case sp.Interval.Std() < time.Second:
		return spec, nil, pol, validation("interval", "interval must be a duration of at least 1s")
	default:
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: sp.Interval.Std()}}
	}
	if sp.TimeZone != "" {
		if _, err := time.LoadLocation(sp.TimeZone); err != nil {
			return spec, nil, pol, validation("time_zone", "unknown time zone %q", sp.TimeZone)
		}
		spec.TimeZoneName = sp.TimeZone
	}
	spec.Jitter = sp.Jitter.Std()
	overlap, ok := overlapPolicies[sp.Overlap]
	if !ok {
		return spec, nil, pol, validation("overlap", "overlap must be skip, buffer_one, buffer_all, cancel_other, terminate_other or allow_all")
	}
	pol.Overlap = overlap
	switch {
	case sp.CatchupWindow == 0:
		pol.CatchupWindow = time.Minute
	case sp.CatchupWindow.Std() < 10*time.Second:
		return spec, nil, pol, validation("catchup_window", "catchup_window must be a duration of at least 10s")
	default:
		pol.CatchupWindow = sp.CatchupWindow.Std()
	}
	payload := sp.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	if len(payload) > MaxPayloadBytes || !json.Valid(payload) {
		return spec, nil, pol, validation("payload", "payload must be JSON of at most %d bytes", MaxPayloadBytes)
	}
	specJSON, _ := json.Marshal(sp)
	// Each run is a timer that is already due: the same delivery, retries and rate limit. The
	// API's view of the spec rides in the action's memo, so GET returns what was PUT.
	action := &client.ScheduleWorkflowAction{
		Memo:                  map[string]any{specMemo: string(specJSON)},
		ID:                    courier.ScheduleID(id),
		Workflow:              courier.KindScheduleRun.Workflow,
		TaskQueue:             courier.KindScheduleRun.TaskQueue(s.taskQueue),
		Args:                  []any{workflows.TimerParams{BizType: sp.BizType, BizID: id, Payload: payload}},
		TypedSearchAttributes: workflows.StartAttributes(courier.KindScheduleRun, courier.RunAttributes{BizType: sp.BizType, BizID: id}),
	}
	return spec, action, pol, nil
}

func scheduleErr(err error, id string) error {
	var nf *serviceerror.NotFound
	var inv *serviceerror.InvalidArgument
	switch {
	case errors.As(err, &nf):
		return courier.Errorf(courier.CodeNotFound, "no schedule %q", id)
	case errors.As(err, &inv):
		return &courier.Error{Code: courier.CodeValidation, Message: inv.Message}
	case errors.Is(err, temporal.ErrScheduleAlreadyRunning):
		return &courier.Error{Code: courier.CodeConflict, Message: fmt.Sprintf("schedule %q already exists; PUT it without If-None-Match to replace it", id),
			Details: map[string]any{"id": id}}
	}
	return err
}

// CreateSchedule creates a schedule; an existing id is a conflict.
// A schedule of a bucketed business type rides the timer wheel (when the service keeps rows);
// any other is a Temporal Schedule. An id is one schedule whichever the mode.
func (s *Service) CreateSchedule(ctx context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error) {
	spec, action, pol, err := s.compile(ctx, id, sp)
	if err != nil {
		return api.Schedule{}, err
	}
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err == nil {
			err = courier.Errorf(courier.CodeConflict, "schedule %q already exists; PATCH it instead", id)
		}
		return api.Schedule{}, err
	}
	if w, err := s.wheelFor(ctx, sp.BizType); err != nil || w != nil {
		if err != nil {
			return api.Schedule{}, err
		}
		rec, err := s.wheelRecord(id, sp)
		if err != nil {
			return api.Schedule{}, err
		}
		if _, err := s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Describe(ctx); err == nil {
			return api.Schedule{}, courier.Errorf(courier.CodeConflict, "schedule %q already exists; PATCH it instead", id)
		} else if courier.ErrorCode(scheduleErr(err, id)) != courier.CodeNotFound {
			return api.Schedule{}, scheduleErr(err, id)
		}
		rec, ref, err := w.CreateScheduleRecord(ctx, rec, s.now())
		if err != nil {
			return api.Schedule{}, err
		}
		s.armTrigger(ctx, ref)
		return s.wheelSchedule(ctx, rec)
	}
	_, err = s.tc.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: courier.ScheduleID(id), Spec: spec, Action: action, Overlap: pol.Overlap, CatchupWindow: pol.CatchupWindow,
		Paused: sp.Paused, TypedSearchAttributes: scheduleAttributes(sp),
	})
	if err != nil {
		return api.Schedule{}, scheduleErr(err, id)
	}
	return s.GetSchedule(ctx, id)
}

// GetSchedule describes a schedule: its spec, state, next and recent runs.
func (s *Service) GetSchedule(ctx context.Context, id string) (api.Schedule, error) {
	if rec, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return api.Schedule{}, err
		}
		return s.wheelSchedule(ctx, rec)
	}
	d, err := s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Describe(ctx)
	if err != nil {
		return api.Schedule{}, scheduleErr(err, id)
	}
	out := api.Schedule{ID: id, Mode: string(courier.TimerModeWorkflow), NextRuns: d.Info.NextActionTimes, Runs: d.Info.NumActions,
		MissedCatchup: d.Info.NumActionsMissedCatchupWindow, SkippedOverlap: d.Info.NumActionsSkippedOverlap}
	if d.Schedule.State != nil {
		out.Paused, out.Note = d.Schedule.State.Paused, d.Schedule.State.Note
	}
	for _, a := range d.Info.RecentActions {
		out.RecentRuns = append(out.RecentRuns, a.ActualTime)
	}
	if a, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction); ok {
		var raw string
		switch v := a.Memo[specMemo].(type) {
		case string:
			raw = v
		case *commonpb.Payload:
			_ = converter.GetDefaultDataConverter().FromPayload(v, &raw)
		}
		_ = json.Unmarshal([]byte(raw), &out.Spec)
	}
	out.Spec.Paused = out.Paused
	if out.NextRuns == nil {
		out.NextRuns = []time.Time{}
	}
	if out.RecentRuns == nil {
		out.RecentRuns = []time.Time{}
	}
	return out, nil
}

// UpdateSchedule replaces a schedule's spec, action and policies (keeping its paused state
// unless the spec says paused).
func (s *Service) UpdateSchedule(ctx context.Context, id string, sp api.ScheduleSpec) (api.Schedule, error) {
	spec, action, pol, err := s.compile(ctx, id, sp)
	if err != nil {
		return api.Schedule{}, err
	}
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return api.Schedule{}, err
		}
		w, err := s.wheelFor(ctx, sp.BizType)
		if err != nil {
			return api.Schedule{}, err
		}
		if w == nil {
			return api.Schedule{}, validation("biz_type", "schedule %q fires on the timer wheel and business type %q is not bucketed: "+
				"a schedule keeps the mode it was created in (delete it and create it again)", id, sp.BizType)
		}
		rec, err := s.wheelRecord(id, sp)
		if err != nil {
			return api.Schedule{}, err
		}
		rec, ref, err := w.UpdateScheduleRecord(ctx, rec, s.now())
		if err != nil {
			return api.Schedule{}, err
		}
		s.armTrigger(ctx, ref)
		return s.wheelSchedule(ctx, rec)
	}
	h := s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id))
	err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		sch := in.Description.Schedule
		sch.Spec, sch.Action, sch.Policy = &spec, action, &pol
		if sp.Paused && sch.State != nil {
			sch.State.Paused = true
		}
		attrs := scheduleAttributes(sp)
		return &client.ScheduleUpdate{Schedule: &sch, TypedSearchAttributes: &attrs}, nil
	}})
	if err != nil {
		return api.Schedule{}, scheduleErr(err, id)
	}
	return s.GetSchedule(ctx, id)
}

// DeleteSchedule removes a schedule; runs already started finish.
func (s *Service) DeleteSchedule(ctx context.Context, id string) error {
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return err
		}
		return s.wheel().DeleteScheduleRecord(ctx, id)
	}
	return scheduleErr(s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Delete(ctx), id)
}

// PauseSchedule, UnpauseSchedule and TriggerSchedule act on a schedule's state.
func (s *Service) PauseSchedule(ctx context.Context, id, note string) error {
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return err
		}
		_, err = s.wheel().PauseScheduleRecord(ctx, id, note)
		return err
	}
	return scheduleErr(s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Pause(ctx, client.SchedulePauseOptions{Note: note}), id)
}

// UnpauseSchedule resumes a paused schedule.
func (s *Service) UnpauseSchedule(ctx context.Context, id, note string) error {
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return err
		}
		_, ref, err := s.wheel().UnpauseScheduleRecord(ctx, id, note, s.now())
		if err == nil {
			s.armTrigger(ctx, ref)
		}
		return err
	}
	return scheduleErr(s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Unpause(ctx, client.ScheduleUnpauseOptions{Note: note}), id)
}

// TriggerSchedule runs a schedule's action once, now.
func (s *Service) TriggerSchedule(ctx context.Context, id string) error {
	if _, ok, err := s.onWheel(ctx, id); err != nil || ok {
		if err != nil {
			return err
		}
		ref, err := s.wheel().TriggerScheduleRecord(ctx, id, s.now())
		if err == nil {
			s.armTrigger(ctx, &ref)
		}
		return err
	}
	return scheduleErr(s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID(id)).Trigger(ctx, client.ScheduleTriggerOptions{}), id)
}

const specMemo = "courier_schedule"

// scheduleAttributes are the search attributes of the schedule itself (not of its runs), so
// ListSchedulePage can select schedules by business type.
func scheduleAttributes(sp api.ScheduleSpec) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(courier.SABizType).ValueSet(sp.BizType))
}

// ScheduleQuery selects schedules for ListSchedulePage. Zero fields do not filter.
type ScheduleQuery struct {
	BizType string // a business type's name (checked by the caller); "": every type
	Paused  *bool  // only paused (true) or only running (false) schedules; nil: both
	Limit   int    // schedules per page, at most
}

// ListSchedulePage reads one page of courier's schedules from Temporal's visibility, newest
// first as Temporal orders them, and the token of the next page (nil on the last). A page may
// hold fewer than q.Limit schedules while a token follows (courier's own sweeper schedule is
// skipped). An item carries the id, the business type, the schedule's own pause and note and
// its next runs; GetSchedule has the whole spec and the recent runs. A schedule created before
// schedules carried their business type as a search attribute is listed without it, and
// found by the business type filter once it is replaced (PUT) again.
//
// Then the schedules on the timer wheel (business types in the bucketed mode), by id, from
// courier's database: their pages follow the last of Temporal's.
func (s *Service) ListSchedulePage(ctx context.Context, q ScheduleQuery, token []byte) ([]api.Schedule, []byte, error) {
	if cursor, ok := strings.CutPrefix(string(token), wheelTokenPrefix); ok {
		return s.listWheelPage(ctx, q, cursor)
	}
	out, next, err := s.listTemporalPage(ctx, q, token)
	if err != nil || next != nil || s.wheel() == nil {
		return out, next, err
	}
	// Temporal's last page: the wheel's first follows on the next page.
	return out, []byte(wheelTokenPrefix), nil
}

// listTemporalPage reads one page of the Temporal Schedules from Temporal's visibility.
func (s *Service) listTemporalPage(ctx context.Context, q ScheduleQuery, token []byte) ([]api.Schedule, []byte, error) {
	var conds []string
	if q.BizType != "" {
		conds = append(conds, fmt.Sprintf("%s = '%s'", courier.SABizType, q.BizType))
	}
	if q.Paused != nil {
		conds = append(conds, fmt.Sprintf("TemporalSchedulePaused = %t", *q.Paused))
	}
	req := &workflowservice.ListSchedulesRequest{
		Namespace: s.namespace, MaximumPageSize: int32(q.Limit), NextPageToken: token, Query: strings.Join(conds, " AND "),
	}
	resp, err := s.tc.WorkflowService().ListSchedules(ctx, req)
	// The raw service call has none of the SDK's retries: wait out the namespace's visibility
	// rate limit (a burst of lists meets it) a few times, about 3 s in all, within ctx.
	for wait := visibilityBackoff; isRateLimited(err) && wait <= 8*visibilityBackoff; wait *= 2 {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(wait):
		}
		resp, err = s.tc.WorkflowService().ListSchedules(ctx, req)
	}
	if err != nil {
		var inv *serviceerror.InvalidArgument
		switch {
		case errors.As(err, &inv):
			return nil, nil, &courier.Error{Code: courier.CodeValidation, Message: inv.Message}
		case isRateLimited(err):
			return nil, nil, &courier.Error{Code: courier.CodeUnavailable, RetryAfter: time.Second,
				Message: "Temporal's visibility is rate limited for the moment (too many lists at once); repeat in a second"}
		}
		return nil, nil, err
	}
	out := make([]api.Schedule, 0, len(resp.GetSchedules()))
	for _, e := range resp.GetSchedules() {
		esc, ok := strings.CutPrefix(e.GetScheduleId(), "schedule/")
		if !ok {
			continue // not one of the API's (the sweeper's)
		}
		id, err := url.PathUnescape(esc)
		if err != nil {
			continue // not an id courier escaped
		}
		info := e.GetInfo()
		sc := api.Schedule{ID: id, Mode: string(courier.TimerModeWorkflow), Paused: info.GetPaused(), Note: info.GetNotes(), NextRuns: []time.Time{}, RecentRuns: []time.Time{}}
		sc.Spec.BizType = searchString(e.GetSearchAttributes(), courier.SABizType)
		sc.Spec.Paused = sc.Paused
		for _, t := range info.GetFutureActionTimes() {
			sc.NextRuns = append(sc.NextRuns, t.AsTime())
		}
		out = append(out, sc)
	}
	return out, resp.GetNextPageToken(), nil
}

// visibilityBackoff is the first wait before a list that Temporal's visibility rate limit
// refused is sent again; each next wait doubles.
const visibilityBackoff = 200 * time.Millisecond

// isRateLimited reports Temporal refusing a call for its rate limits (ResourceExhausted), which
// a moment's wait lifts.
func isRateLimited(err error) bool {
	var re *serviceerror.ResourceExhausted
	return errors.As(err, &re)
}
