package courier_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier"
)

// Fire times of the wheel's schedules: intervals are multiples since the epoch; cron times are
// wall-clock times in the zone, a time a daylight-saving change skips does not fire that day
// and a time it repeats fires at both occurrences (as docs/timers.md says); jitter delays by
// less than its bound, the same for every worker.
func TestScheduleTiming(t *testing.T) {
	iv, err := courier.ScheduleTiming{Interval: 10 * time.Second}.Compile()
	require.NoError(t, err)
	at := time.Date(2026, 11, 29, 10, 0, 3, 0, time.UTC)
	require.Equal(t, time.Date(2026, 11, 29, 10, 0, 10, 0, time.UTC), iv.Next(at))
	require.Equal(t, time.Date(2026, 11, 29, 10, 0, 20, 0, time.UTC), iv.Next(iv.Next(at)))

	gap, err := courier.ScheduleTiming{Cron: "30 2 * * *", TimeZone: "America/New_York"}.Compile()
	require.NoError(t, err)
	n := gap.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC), n, "02:30 on 8 March does not exist in New York")

	rep, err := courier.ScheduleTiming{Cron: "30 1 * * *", TimeZone: "America/New_York"}.Compile()
	require.NoError(t, err)
	first := rep.Next(time.Date(2026, 10, 31, 12, 0, 0, 0, time.UTC))
	require.Equal(t, time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), first, "01:30 EDT")
	require.Equal(t, time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC), rep.Next(first), "01:30 EST, the repeat")

	j, err := courier.ScheduleTiming{Interval: time.Minute, Jitter: 30 * time.Second}.Compile()
	require.NoError(t, err)
	nominal := time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC)
	fire := j.FireAt("s1", nominal)
	require.Equal(t, fire, j.FireAt("s1", nominal), "every worker computes the same delay")
	require.False(t, fire.Before(nominal))
	require.Less(t, fire.Sub(nominal), 30*time.Second)

	for name, bad := range map[string]courier.ScheduleTiming{
		"both": {Cron: "* * * * *", Interval: time.Minute}, "neither": {}, "short": {Interval: time.Millisecond},
		"fields": {Cron: "* * *"}, "range": {Cron: "61 * * * *"}, "tz": {Cron: "* * * * *", TimeZone: "Mars/Olympus"},
		"tz in cron": {Cron: "CRON_TZ=UTC * * * * *"},
	} {
		_, err := bad.Compile()
		require.Error(t, err, name)
	}
}
