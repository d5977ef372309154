package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
	"github.com/courier-oss/courier/apikey"
	cc "github.com/courier-oss/courier/client"
	"github.com/courier-oss/courier/gateway"
)

// Cron schedules on Temporal Schedules: PUT with If-None-Match: * creates (409 on an existing
// id); runs deliver like timers; the list finds schedules by business type and paused state;
// pause stops them; trigger runs once now; PUT replaces the spec (cron with a time zone); bad
// specs are 422; delete removes it.
func TestSchedulesEndToEnd(t *testing.T) {
	s := newStack(t, "sqlite")
	rcv := s.bizType("marketing.digest", 0)
	s.timerWorker(false)
	ctx := t.Context()
	_, token, err := s.store.CreateAPIKey(ctx, "marketing", []apikey.Scope{apikey.ScopeProducer})
	require.NoError(t, err)
	gw := httptest.NewServer(gateway.New(gateway.Config{}, gateway.Deps{Keys: s.store, Outbox: s.store, Schedules: s.timerService(), Logger: quiet}))
	t.Cleanup(gw.Close)
	call := func(method, path string, body any) (int, api.Schedule) {
		resp := do(t, method, gw.URL+path, token, body)
		var sc api.Schedule
		if resp.StatusCode < 300 && resp.StatusCode != http.StatusNoContent {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&sc))
		}
		return resp.StatusCode, sc
	}

	for name, body := range map[string]map[string]any{
		"both":     {"biz_type": "marketing.digest", "cron": "0 9 * * *", "interval": "1h"},
		"neither":  {"biz_type": "marketing.digest"},
		"bad tz":   {"biz_type": "marketing.digest", "cron": "0 9 * * *", "time_zone": "Mars/Olympus"},
		"bad type": {"biz_type": "nope", "interval": "1h"},
		"short":    {"biz_type": "marketing.digest", "interval": "10ms"},
		"bad cron": {"biz_type": "marketing.digest", "cron": "every day"},
		"catchup":  {"biz_type": "marketing.digest", "interval": "1h", "catchup_window": "1s"},
		"overlap":  {"biz_type": "marketing.digest", "interval": "1h", "overlap": "sometimes"},
	} {
		status, _ := call("PUT", "/v1/schedules/bad", body)
		require.Equal(t, http.StatusUnprocessableEntity, status, name)
	}

	producer, err := cc.New(gw.URL, cc.WithAPIKey(token))
	require.NoError(t, err)
	created, err := producer.CreateSchedule(ctx, "digest", cc.ScheduleSpec{BizType: "marketing.digest", Interval: api.PositiveDuration(time.Second),
		Payload: json.RawMessage(`{"v":1}`)})
	require.NoError(t, err)
	require.Equal(t, api.PositiveDuration(time.Second), created.Spec.Interval)
	require.NotEmpty(t, created.NextRuns)
	_, err = producer.CreateSchedule(ctx, "digest", cc.ScheduleSpec{BizType: "marketing.digest", Interval: api.PositiveDuration(time.Second)})
	require.ErrorIs(t, err, cc.ErrConflict, "If-None-Match: * never replaces")
	status, _ := call("PUT", "/v1/schedules/quiet", map[string]any{"biz_type": "marketing.digest", "interval": "1h", "paused": true})
	require.Equal(t, http.StatusCreated, status)

	// The list, from Temporal's visibility (a moment behind): by business type, by paused
	// state, a page at a time.
	ids := func(q cc.ScheduleQuery) []string {
		var out []string
		for sc, err := range producer.AllSchedules(ctx, q) {
			require.NoError(t, err)
			out = append(out, sc.ID+"/"+sc.Spec.BizType)
		}
		slices.Sort(out)
		return out
	}
	yes, no := true, false
	require.Eventually(t, func() bool {
		return slices.Equal(ids(cc.ScheduleQuery{BizType: "marketing.digest", Limit: 1}), []string{"digest/marketing.digest", "quiet/marketing.digest"})
	}, 30*time.Second, 200*time.Millisecond, "both schedules of the type, one page at a time")
	require.Eventually(t, func() bool {
		return slices.Equal(ids(cc.ScheduleQuery{Paused: &yes}), []string{"quiet/marketing.digest"}) &&
			slices.Equal(ids(cc.ScheduleQuery{Paused: &no}), []string{"digest/marketing.digest"})
	}, 30*time.Second, 200*time.Millisecond, "paused and running schedules apart")
	require.Empty(t, ids(cc.ScheduleQuery{BizType: "other.type"}))
	require.NoError(t, producer.DeleteSchedule(ctx, "quiet"))

	require.Eventually(t, func() bool { return rcv.count("digest") >= 2 }, time.Minute, 50*time.Millisecond, "runs are delivered")

	status, sc := call("POST", "/v1/schedules/digest/pause", map[string]string{"note": "holiday"})
	require.Equal(t, http.StatusOK, status)
	require.True(t, sc.Paused)
	require.Equal(t, "holiday", sc.Note)
	// Let any run started before the pause finish, then nothing more arrives while paused.
	require.Eventually(t, func() bool {
		d, err := s.tc.ScheduleClient().GetHandle(ctx, courier.ScheduleID("digest")).Describe(ctx)
		return err == nil && len(d.Info.RunningWorkflows) == 0
	}, 30*time.Second, 50*time.Millisecond)
	paused := rcv.count("digest")
	require.Never(t, func() bool { return rcv.count("digest") > paused }, 2500*time.Millisecond, 100*time.Millisecond, "a paused schedule does not run")

	status, _ = call("POST", "/v1/schedules/digest/trigger", nil)
	require.Equal(t, http.StatusOK, status)
	require.Eventually(t, func() bool { return rcv.count("digest") == paused+1 }, 30*time.Second, 50*time.Millisecond, "trigger runs once now")

	status, sc = call("PUT", "/v1/schedules/digest", map[string]any{"biz_type": "marketing.digest", "cron": "0 9 * * *", "time_zone": "Asia/Shanghai", "paused": true})
	require.Equal(t, http.StatusOK, status)
	// POST and PATCH, the verbs before PUT, are refused and change nothing: no aliases before 1.0.
	for _, m := range []string{"POST", "PATCH"} {
		status, _ := call(m, "/v1/schedules/digest", map[string]any{"biz_type": "marketing.digest", "interval": "1h"})
		require.Equal(t, http.StatusMethodNotAllowed, status, m)
	}
	got, err := producer.GetSchedule(ctx, "digest")
	require.NoError(t, err)
	require.Equal(t, "0 9 * * *", got.Spec.Cron, "the refused verbs changed nothing")
	require.Equal(t, "0 9 * * *", sc.Spec.Cron)
	require.NotEmpty(t, sc.NextRuns)
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	next := sc.NextRuns[0].In(shanghai)
	require.Equal(t, 9, next.Hour(), "09:00 in Shanghai")
	require.Equal(t, 0, next.Minute())

	status, _ = call("DELETE", "/v1/schedules/digest", nil)
	require.Equal(t, http.StatusNoContent, status)
	require.Eventually(t, func() bool {
		status, _ := call("GET", "/v1/schedules/digest", nil)
		return status == http.StatusNotFound
	}, 10*time.Second, 100*time.Millisecond)
	require.Zero(t, rcv.bad)
}
