package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/api"
)

// Requests leave zero durations out; answers read them back, "0s" and "" as zero.
func TestDurationJSON(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(api.QueueConfig{ProcessingTimeout: api.PositiveDuration(90 * time.Second)})
	require.NoError(t, err)
	require.JSONEq(t, `{"processing_timeout":"1m30s"}`, string(b), "zero durations are left out")

	var q api.Queue
	require.NoError(t, json.Unmarshal([]byte(`{"heartbeat_timeout":"0s","pending_timeout":"24h0m0s","purge_age":""}`), &q))
	require.Zero(t, q.HeartbeatTimeout)
	require.Equal(t, api.Duration(24*time.Hour), q.PendingTimeout)
	require.Error(t, json.Unmarshal([]byte(`{"pending_timeout":5}`), &q))
}

// A duration that is not one is a type error naming its field, so the gateway can say which
// field; a PositiveDuration also refuses an explicit zero, a Duration takes it.
func TestDurationRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, field string
	}{
		{`{"pending_timeout":"soon"}`, "pending_timeout"},
		{`{"pending_timeout":"0s"}`, "pending_timeout"},
		{`{"purge_age":"0"}`, "purge_age"},
		{`{"retry":{"initial_interval":"-1s"}}`, "retry.initial_interval"},
		{`{"heartbeat_timeout":"-1s"}`, "heartbeat_timeout"},
		{`{"heartbeat_timeout":true}`, "heartbeat_timeout"},
	} {
		var c api.QueueConfig
		var te *json.UnmarshalTypeError
		require.ErrorAs(t, json.Unmarshal([]byte(tc.body), &c), &te, tc.body)
		require.Equal(t, tc.field, te.Field, tc.body)
		require.True(t, api.IsDurationType(te.Type), tc.body)
	}
	for _, off := range []string{`"0s"`, `"0"`, `""`, `null`} {
		var c api.QueueConfig
		require.NoError(t, json.Unmarshal([]byte(`{"heartbeat_timeout":`+off+`}`), &c), off)
		require.Zero(t, c.HeartbeatTimeout, off)
	}
}

// A timer request carries fire_at or delay as given; At and After build each.
func TestTimerRequestJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   api.TimerRequest
		want string
	}{
		{api.TimerRequest{BizType: "o", BizID: "1", When: api.After(time.Minute)}, `{"biz_type":"o","biz_id":"1","delay":"1m0s"}`},
		{api.TimerRequest{BizType: "o", BizID: "1", When: api.After(0)}, `{"biz_type":"o","biz_id":"1","delay":"0s"}`},
		{api.TimerRequest{BizType: "o", BizID: "1", When: api.At(at), Payload: json.RawMessage(`{"a":1}`)},
			`{"biz_type":"o","biz_id":"1","fire_at":"2030-01-02T03:04:05Z","payload":{"a":1}}`},
	} {
		b, err := json.Marshal(tc.in)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(b))
		var back api.TimerRequest
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, tc.in, back)
	}
	b, err := json.Marshal(api.Reschedule{When: api.After(time.Hour)})
	require.NoError(t, err)
	require.JSONEq(t, `{"delay":"1h0m0s"}`, string(b))
}

// Resolve turns a When into a fire time: a delay from the moment given, and refuses both or
// neither.
func TestWhenResolve(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at, delay, err := api.After(time.Minute).Resolve(now)
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Minute), at)
	require.Equal(t, time.Minute, *delay)
	at, delay, err = api.At(now.Add(time.Hour)).Resolve(now)
	require.NoError(t, err)
	require.Equal(t, now.Add(time.Hour), at)
	require.Nil(t, delay)
	both := api.At(now)
	both.Delay = api.After(time.Second).Delay
	for _, w := range []api.When{{}, both, api.At(time.Time{})} {
		_, _, err := w.Resolve(now)
		require.Error(t, err)
	}
}

// A queue as the API shows it, put back through Config, is the same queue: every setting kept
// (secrets apart, which a PUT without them keeps), implied ones left implied.
func TestQueueConfigRoundTrip(t *testing.T) {
	t.Parallel()
	full := courier.Queue{Name: "docs", PushURL: "https://w.example/push", AllowPrivate: true, ConcurrencyLimit: 40,
		Weights: courier.BandWeights{50, 30, 10, 6, 4}, PendingTimeout: 2 * time.Hour, ProcessingTimeout: 10 * time.Minute,
		PushTimeout: 20 * time.Second, HeartbeatTimeout: time.Minute,
		Retry:            courier.RetryPolicy{MaxAttempts: 7, InitialInterval: 3 * time.Second, BackoffCoef: 1.5, MaxInterval: time.Hour},
		SuccessRetention: 48 * time.Hour, PurgeAge: 96 * time.Hour, InsertRate: 12.5, InsertBurst: 30, MaxPending: 5000,
		PerKeyLimit: 8, KeyWeights: map[string]int{"t-1": 3}, DispatchRate: 7.5, DispatchBurst: 20,
		DispatchMode: courier.DispatchBatched, PushBatchSize: 25}.WithDefaults()
	for _, q := range []courier.Queue{
		full,
		courier.Queue{Name: "plain"}.WithDefaults(),
		courier.Queue{Name: "fair", FairKeys: true, DispatchRate: 2.5}.WithDefaults(), // burst implied by the rate
	} {
		shown := api.QueueOf(q)
		back, err := shown.Config().Domain(q.Name)
		require.NoError(t, err, q.Name)
		back = back.WithDefaults()
		q.Secrets, back.Secrets = nil, nil
		require.Equal(t, q, back, q.Name)
	}
	require.Zero(t, api.QueueOf(courier.Queue{Name: "fair", DispatchRate: 2.5}.WithDefaults()).Config().DispatchBurst, "an implied burst stays implied")
	require.False(t, api.QueueOf(full).Config().FairKeys, "fair keys implied by the per-key limit stay implied")
}
