package timers

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
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
		return courier.Errorf(courier.CodeConflict, "schedule %q already exists; PATCH it instead", id)
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
		Paused: sp.Paused,
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
		return &client.ScheduleUpdate{Schedule: &sch}, nil
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
