package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/store"
)

// A claim delivers a schedule's trigger within its catch-up window and cancels one found past
// it (missed, never delivered), writing in both cases the schedule's next trigger: after a
// missed one, the first fire time within the window. A trigger fires once: a second claim
// does not take it again.
func TestScheduleClaimCatchup(t *testing.T) {
	forEachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := t.Context()
		const bizType = "report.tick"
		now := time.Now().UTC()
		timing := courier.ScheduleTiming{Interval: 10 * time.Second}
		rec := func(id string) courier.ScheduleRecord {
			return courier.ScheduleRecord{ID: id, BizType: bizType, Timing: timing, CatchupWindow: time.Minute,
				Payload: []byte(`{"r":1}`), Spec: []byte(`{}`)}
		}
		// Stored five minutes ago: their first triggers are four minutes past the window.
		var late []courier.ScheduleRecord
		for i := range 3 {
			late = append(late, rec(fmt.Sprintf("late-%d", i)))
		}
		_, err := s.CreateScheduleRecords(ctx, late, now.Add(-5*time.Minute))
		require.NoError(t, err)
		// Stored 20 s ago: its first trigger is due and within the window.
		_, err = s.CreateScheduleRecords(ctx, []courier.ScheduleRecord{rec("due")}, now.Add(-20*time.Second))
		require.NoError(t, err)

		n, _, err := s.ReserveDueTimers(ctx, bizType, courier.TimerBucket(now), "claim-1", 100)
		require.NoError(t, err)
		require.Equal(t, 1, n, "only the trigger within its window is taken")

		compiled, err := timing.Compile()
		require.NoError(t, err)
		first := compiled.Next(now.Add(-5 * time.Minute))
		for _, sch := range late {
			missed, err := s.GetTimerRecord(ctx, bizType, courier.ScheduleTriggerID(sch.ID, first))
			require.NoError(t, err)
			require.Equal(t, courier.TimerCancelled, missed.State)
			require.Equal(t, courier.ScheduleMissedError, missed.LastError)
			st, err := s.ScheduleTriggerStats(ctx, sch.ID)
			require.NoError(t, err)
			require.Equal(t, 1, st.Missed)
			require.Zero(t, st.Runs)
			require.NotNil(t, st.Next)
			require.True(t, st.NextNominal.After(now.Add(-time.Minute-time.Second)), "the next trigger is within the window: %s", st.NextNominal)
		}
		st, err := s.ScheduleTriggerStats(ctx, "due")
		require.NoError(t, err)
		require.Equal(t, 1, st.Runs)
		require.Zero(t, st.Missed)

		// The late schedules' catch-up triggers are due now; the one taken is not taken again.
		n, _, err = s.ReserveDueTimers(ctx, bizType, courier.TimerBucket(now.Add(time.Second)), "claim-2", 100)
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, 3)
		require.LessOrEqual(t, n, 4)
		st, err = s.ScheduleTriggerStats(ctx, "due")
		require.NoError(t, err)
		require.LessOrEqual(t, st.Runs, 2)
	})
}
