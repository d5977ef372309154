package timers

import (
	"context"
	"encoding/json"
	"time"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// ScheduleRows is what schedules on the timer wheel need from courier's database
// (store.Store). A service whose rows have it puts the schedules of bucketed business types on
// the wheel; without it every schedule is a Temporal Schedule.
type ScheduleRows interface {
	CreateScheduleRecord(ctx context.Context, rec courier.ScheduleRecord, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error)
	UpdateScheduleRecord(ctx context.Context, rec courier.ScheduleRecord, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error)
	PauseScheduleRecord(ctx context.Context, id, note string) (courier.ScheduleRecord, error)
	UnpauseScheduleRecord(ctx context.Context, id, note string, now time.Time) (courier.ScheduleRecord, *courier.TimerBucketRef, error)
	DeleteScheduleRecord(ctx context.Context, id string) error
	TriggerScheduleRecord(ctx context.Context, id string, now time.Time) (courier.TimerBucketRef, error)
	GetScheduleRecord(ctx context.Context, id string) (courier.ScheduleRecord, error)
	ListScheduleRecords(ctx context.Context, f courier.ScheduleFilter) ([]courier.ScheduleRecord, bool, error)
	ScheduleTriggerStats(ctx context.Context, id string) (courier.ScheduleTriggers, error)
}

// wheel is the service's schedules on the timer wheel, nil without them.
func (s *Service) wheel() ScheduleRows {
	if w, ok := s.rows.(ScheduleRows); ok {
		return w
	}
	return nil
}

// wheelFor is the wheel when bizType's schedules ride it (the type is bucketed and the
// service keeps rows), nil otherwise.
func (s *Service) wheelFor(ctx context.Context, bizType string) (ScheduleRows, error) {
	w := s.wheel()
	if w == nil {
		return nil, nil
	}
	b, err := s.types.GetBizType(ctx, bizType)
	if err != nil {
		return nil, err
	}
	if b.TimerMode != courier.TimerModeBucketed {
		return nil, nil
	}
	return w, nil
}

// wheelOverlap is the one overlap policy a schedule on the wheel has: every trigger is
// delivered, whether or not the one before is still being retried (allow_all). Temporal's
// other policies act on a run that is still open; a trigger on the wheel is a delivery, not a
// run, so they are refused rather than ignored.
const wheelOverlap = "allow_all"

// wheelRecord checks a spec for the wheel and builds its record.
func (s *Service) wheelRecord(id string, sp api.ScheduleSpec) (courier.ScheduleRecord, error) {
	if sp.Overlap != "" && sp.Overlap != wheelOverlap {
		return courier.ScheduleRecord{}, validation("overlap",
			"business type %q is bucketed, so its schedules fire on the timer wheel, where each trigger is a delivery and every one is delivered: overlap must be allow_all or omitted, not %q",
			sp.BizType, sp.Overlap)
	}
	rec := courier.ScheduleRecord{ID: id, BizType: sp.BizType, Paused: sp.Paused,
		Timing: courier.ScheduleTiming{Cron: sp.Cron, Interval: sp.Interval.Std(), TimeZone: sp.TimeZone, Jitter: sp.Jitter.Std()}}
	if _, err := rec.Timing.Compile(); err != nil {
		field := "cron"
		switch {
		case sp.Cron == "" && sp.Interval != 0:
			field = "interval"
		case sp.TimeZone != "" && sp.Cron != "":
			if _, lerr := time.LoadLocation(sp.TimeZone); lerr != nil {
				field = "time_zone"
			}
		}
		return rec, validation(field, "%s", err.Error())
	}
	rec.CatchupWindow = time.Minute
	if sp.CatchupWindow != 0 {
		rec.CatchupWindow = sp.CatchupWindow.Std()
	}
	rec.Payload = sp.Payload
	if len(rec.Payload) == 0 {
		rec.Payload = json.RawMessage("null")
	}
	rec.Spec, _ = json.Marshal(sp)
	return rec, nil
}

// armTrigger arms the bucket a schedule's trigger waits in; one whose start fails is armed by
// the sweep once it is overdue.
func (s *Service) armTrigger(ctx context.Context, ref *courier.TimerBucketRef) {
	if ref == nil {
		return
	}
	if err := s.ArmBucket(ctx, ref.BizType, ref.Bucket); err != nil && ctx.Err() == nil {
		s.Logger.WarnContext(ctx, "arming a schedule trigger's bucket failed; the sweep will arm it", "biz_type", ref.BizType,
			"bucket", ref.Bucket, "error", err)
	}
}

// onWheel reads a schedule on the wheel; ok is false when id is not one (it may be a Temporal
// Schedule).
func (s *Service) onWheel(ctx context.Context, id string) (courier.ScheduleRecord, bool, error) {
	w := s.wheel()
	if w == nil {
		return courier.ScheduleRecord{}, false, nil
	}
	rec, err := w.GetScheduleRecord(ctx, id)
	if courier.ErrorCode(err) == courier.CodeNotFound {
		return rec, false, nil
	}
	return rec, err == nil, err
}

// wheelSchedule shows a schedule on the wheel.
func (s *Service) wheelSchedule(ctx context.Context, rec courier.ScheduleRecord) (api.Schedule, error) {
	out := api.Schedule{ID: rec.ID, Paused: rec.Paused, Note: rec.Note, Mode: string(courier.TimerModeBucketed),
		NextRuns: []time.Time{}, RecentRuns: []time.Time{}}
	_ = json.Unmarshal(rec.Spec, &out.Spec)
	out.Spec.Paused = rec.Paused
	st, err := s.wheel().ScheduleTriggerStats(ctx, rec.ID)
	if err != nil {
		return api.Schedule{}, err
	}
	out.Runs, out.MissedCatchup = st.Runs, st.Missed
	if st.Recent != nil {
		out.RecentRuns = st.Recent
	}
	if st.Next != nil {
		out.NextRuns = append(out.NextRuns, *st.Next)
		if timing, err := rec.Timing.Compile(); err == nil && !st.NextNominal.IsZero() {
			// The following fire times, as the timing computes them from the pending trigger's.
			n := st.NextNominal
			for range 4 {
				if n = timing.Next(n); n.IsZero() {
					break
				}
				out.NextRuns = append(out.NextRuns, timing.FireAt(rec.ID, n))
			}
		}
	}
	return out, nil
}

// wheelTokenPrefix starts the page tokens of the wheel's schedules, which a schedule list
// reads after Temporal's: the rest of the token is the last id of the page before.
const wheelTokenPrefix = "wheel:"

// listWheelPage reads one page of the schedules on the wheel q selects, by id, after the id
// cursor; next is the cursor of the following page (nil on the last).
func (s *Service) listWheelPage(ctx context.Context, q ScheduleQuery, cursor string) ([]api.Schedule, []byte, error) {
	w := s.wheel()
	if w == nil {
		return nil, nil, nil
	}
	recs, more, err := w.ListScheduleRecords(ctx, courier.ScheduleFilter{BizType: q.BizType, Paused: q.Paused, After: cursor, Limit: q.Limit})
	if err != nil {
		return nil, nil, err
	}
	out := make([]api.Schedule, 0, len(recs))
	for _, r := range recs {
		sc, err := s.wheelSchedule(ctx, r)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, sc)
	}
	var next []byte
	if more && len(recs) > 0 {
		next = []byte(wheelTokenPrefix + recs[len(recs)-1].ID)
	}
	return out, next, nil
}
