package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	cc "github.com/courier-oss/courier/client"
)

// triggerOf splits a wheel trigger's biz_id (<schedule id>@<nominal fire time>) into its
// schedule and nominal time; manual is set for a trigger asked for by hand (@now/…).
func triggerOf(t *testing.T, bizID string) (id string, nominal time.Time, manual bool) {
	t.Helper()
	i := strings.LastIndexByte(bizID, '@')
	require.Positive(t, i, bizID)
	id, rest := bizID[:i], bizID[i+1:]
	if at, ok := strings.CutPrefix(rest, "now/"); ok {
		rest, manual = at, true
	}
	nominal, err := time.Parse(time.RFC3339Nano, rest)
	require.NoError(t, err, bizID)
	return id, nominal, manual
}

// wheelArrivals groups a receiver's arrivals by schedule: nominal fire time → delivery ids.
func wheelArrivals(t *testing.T, rcv *bucketReceiver) map[string]map[time.Time][]arrival {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	out := map[string]map[time.Time][]arrival{}
	for bizID, as := range rcv.got {
		id, nominal, manual := triggerOf(t, bizID)
		if manual {
			id += "@now"
		}
		if out[id] == nil {
			out[id] = map[time.Time][]arrival{}
		}
		out[id][nominal] = append(out[id][nominal], as...)
	}
	return out
}

// Schedules of a bucketed business type fire on the timer wheel, on both databases, with two
// workers claiming: every (schedule, fire time) is delivered under one delivery id, never
// before its fire time (jitter included); an acknowledged pause and delete win (no trigger of
// a later fire time); trigger now fires once; the list filters and pages; overlap policies
// other than allow_all are refused with 422.
func TestWheelSchedules(t *testing.T) {
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			s := newStack(t, dialect)
			rcv, url, secret := newBucketReceiver(t)
			ctx := t.Context()
			_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "report.tick", Delivery: courier.DeliveryHTTP,
				CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed})
			require.NoError(t, err)
			s.timerWorker(false)
			s.timerWorker(false) // two workers claim the same buckets
			producer, _ := s.bucketedGateway()

			for name, sp := range map[string]cc.ScheduleSpec{
				"skip":     {BizType: "report.tick", Interval: api.PositiveDuration(time.Second), Overlap: "skip"},
				"buffer":   {BizType: "report.tick", Interval: api.PositiveDuration(time.Second), Overlap: "buffer_one"},
				"bad cron": {BizType: "report.tick", Cron: "61 * * * *"},
				"tz":       {BizType: "report.tick", Cron: "0 9 * * *", TimeZone: "Mars/Olympus"},
			} {
				_, err := producer.CreateSchedule(ctx, "bad", sp)
				var apiErr *cc.Error
				require.True(t, errors.As(err, &apiErr), name)
				require.Equal(t, 422, apiErr.StatusCode, name)
			}

			const n = 12
			for i := range n {
				sp := cc.ScheduleSpec{BizType: "report.tick", Interval: api.PositiveDuration(time.Second),
					Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}
				if i%3 == 0 {
					sp.Jitter = api.Duration(800 * time.Millisecond)
				}
				sc, err := producer.CreateSchedule(ctx, fmt.Sprintf("tick-%02d", i), sp)
				require.NoError(t, err)
				require.Equal(t, "bucketed", sc.Mode)
				require.NotEmpty(t, sc.NextRuns)
			}
			_, err = producer.CreateSchedule(ctx, "tick-00", cc.ScheduleSpec{BizType: "report.tick", Interval: api.PositiveDuration(time.Second)})
			require.ErrorIs(t, err, cc.ErrConflict)

			require.Eventually(t, func() bool {
				got := wheelArrivals(t, rcv)
				for i := range n {
					if len(got[fmt.Sprintf("tick-%02d", i)]) < 3 {
						return false
					}
				}
				return true
			}, time.Minute, 100*time.Millisecond, "every schedule fires every second")

			// Pause one, delete another: from the acknowledgement on, no later fire time.
			_, err = producer.PauseSchedule(ctx, "tick-01", "quiet")
			require.NoError(t, err)
			pausedAt := time.Now()
			require.NoError(t, producer.DeleteSchedule(ctx, "tick-02"))
			deletedAt := time.Now()
			_, err = producer.GetSchedule(ctx, "tick-02")
			require.ErrorIs(t, err, cc.ErrNotFound)
			sc, err := producer.TriggerSchedule(ctx, "tick-01")
			require.NoError(t, err)
			require.True(t, sc.Paused)

			// The others go on meanwhile: wait for three more seconds of them.
			mark := time.Now()
			require.Eventually(t, func() bool {
				for nominal := range wheelArrivals(t, rcv)["tick-03"] {
					if nominal.After(mark.Add(3 * time.Second)) {
						return true
					}
				}
				return false
			}, time.Minute, 100*time.Millisecond)

			got := wheelArrivals(t, rcv)
			for nominal := range got["tick-01"] {
				require.False(t, nominal.After(pausedAt), "a trigger of %s after the pause was acknowledged", nominal)
			}
			for nominal := range got["tick-02"] {
				require.False(t, nominal.After(deletedAt), "a trigger of %s after the delete was acknowledged", nominal)
			}
			require.Eventually(t, func() bool { return len(wheelArrivals(t, rcv)["tick-01@now"]) == 1 }, 30*time.Second,
				50*time.Millisecond, "trigger now fires once, also while paused")

			// Exactly one delivery id per (schedule, fire time), never early.
			got = wheelArrivals(t, rcv)
			for id, byTime := range got {
				for nominal, as := range byTime {
					ids := map[string]bool{}
					for _, a := range as {
						ids[a.deliveryID] = true
						require.False(t, a.at.Before(a.fireAt), "%s@%s arrived before its fire time", id, nominal)
						require.False(t, a.fireAt.Before(nominal), "%s@%s: fire time before the nominal one", id, nominal)
						require.Less(t, a.fireAt.Sub(nominal), time.Second, "jitter stays below its bound")
					}
					require.Len(t, ids, 1, "%s@%s was triggered as %d different deliveries", id, nominal, len(ids))
				}
			}
			// Consecutive: no fire time skipped between a schedule's first and last.
			for i := 3; i < n; i++ {
				byTime := got[fmt.Sprintf("tick-%02d", i)]
				var first, last time.Time
				for nominal := range byTime {
					if first.IsZero() || nominal.Before(first) {
						first = nominal
					}
					if nominal.After(last) {
						last = nominal
					}
				}
				require.Len(t, byTime, int(last.Sub(first)/time.Second)+1, "tick-%02d skipped a fire time", i)
			}

			// The list: by type, by paused, page after page.
			yes := true
			var paused []string
			for sc, err := range producer.AllSchedules(ctx, cc.ScheduleQuery{BizType: "report.tick", Paused: &yes}) {
				require.NoError(t, err)
				paused = append(paused, sc.ID)
			}
			require.Equal(t, []string{"tick-01"}, paused)
			seen := map[string]bool{}
			token := ""
			for range n {
				page, err := producer.ListSchedules(ctx, cc.ScheduleQuery{BizType: "report.tick", Limit: 5, PageToken: token})
				require.NoError(t, err)
				for _, it := range page.Items {
					seen[it.ID] = true
				}
				if token = page.NextPageToken; token == "" {
					break
				}
			}
			require.Len(t, seen, n-1, "every schedule but the deleted one")

			one, err := producer.GetSchedule(ctx, "tick-04")
			require.NoError(t, err)
			require.Positive(t, one.Runs)
			require.NotEmpty(t, one.RecentRuns)

			// Unpause resumes from the next fire time; PATCH changes the timing.
			_, err = producer.UnpauseSchedule(ctx, "tick-01", "")
			require.NoError(t, err)
			resumed := time.Now()
			require.Eventually(t, func() bool {
				for nominal := range wheelArrivals(t, rcv)["tick-01"] {
					if nominal.After(resumed) {
						return true
					}
				}
				return false
			}, time.Minute, 100*time.Millisecond, "an unpaused schedule fires again")
			up, err := producer.PutSchedule(ctx, "tick-05", cc.ScheduleSpec{BizType: "report.tick", Cron: "0 9 * * *", TimeZone: "Asia/Shanghai"})
			require.NoError(t, err)
			require.Equal(t, "0 9 * * *", up.Spec.Cron)
			require.NotEmpty(t, up.NextRuns)
			require.Equal(t, 1, up.NextRuns[0].In(time.UTC).Hour(), "09:00 in Shanghai is 01:00 UTC")
		})
	}
}

// A schedule on the wheel after downtime: the trigger found past the catch-up window is not
// delivered (counted as missed), the fire times within the window are caught up, each once,
// and the schedule goes on.
func TestWheelScheduleCatchup(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv, url, secret := newBucketReceiver(t)
	ctx := t.Context()
	_, _, err := s.store.PutBizType(ctx, courier.BizType{Name: "report.tick", Delivery: courier.DeliveryHTTP,
		CallbackURL: url, Secrets: []string{secret}, TimerMode: courier.TimerModeBucketed})
	require.NoError(t, err)
	producer, _ := s.bucketedGateway()
	created := time.Now()
	_, err = producer.CreateSchedule(ctx, "late", cc.ScheduleSpec{BizType: "report.tick", Interval: api.PositiveDuration(time.Second),
		CatchupWindow: api.PositiveDuration(10 * time.Second)})
	require.NoError(t, err)
	// No worker for 14 s: the first trigger is 13 s late when one starts.
	require.Never(t, func() bool { return rcv.delivered() > 0 }, 14*time.Second, time.Second)
	started := time.Now()
	s.timerWorker(false)
	require.Eventually(t, func() bool {
		for nominal := range wheelArrivals(t, rcv)["late"] {
			if nominal.After(started.Add(2 * time.Second)) {
				return true
			}
		}
		return false
	}, time.Minute, 100*time.Millisecond, "the schedule goes on after the catch-up")
	byTime := wheelArrivals(t, rcv)["late"]
	var first time.Time
	for nominal, as := range byTime {
		if first.IsZero() || nominal.Before(first) {
			first = nominal
		}
		ids := map[string]bool{}
		for _, a := range as {
			ids[a.deliveryID] = true
		}
		require.Len(t, ids, 1)
	}
	require.True(t, first.After(created.Add(2*time.Second)), "the first fire time, past the window, was not delivered")
	require.False(t, first.Before(started.Add(-11*time.Second)), "nothing older than the window was delivered")
	sc, err := producer.GetSchedule(ctx, "late")
	require.NoError(t, err)
	require.Positive(t, sc.MissedCatchup)
}
