package bench

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each kind's results become rows with the same fields: rates, latencies in milliseconds, the
// cost per item, and (timers only) the early deliveries, (tasks, outbox) the CPU per item.
func TestReports(t *testing.T) {
	t.Parallel()
	cost := Cost{Events: 11.5, Actions: 2}
	lat := func(ms time.Duration) time.Duration { return ms * time.Millisecond }
	want := func(scenario string, perS float64, early int) ReportRow {
		return ReportRow{Scenario: scenario, N: 30, ThroughputPerS: perS, P50Ms: 1.5, P99Ms: 20, MaxMs: 300,
			HistoryEventsPerItem: 11.5, ActionsPerItem: 2, Early: early}
	}
	outbox := want("courier-postgres", 60, 0)
	outbox.CPUMsPerItem, outbox.GCCPUMsPerItem, outbox.PostgresCPUMsPerItem = 17, 0.5, 1
	require.Equal(t, Report{Kind: "outbox", Rows: []ReportRow{want("bare", 60, 0), outbox}}, OutboxReport(OutboxRun{Results: []Result{
		{Key: "bare", N: 30, Throughput: 60, P50: 1500 * time.Microsecond, P99: lat(20), Max: lat(300), Cost: cost},
		{Key: "courier-postgres", N: 30, Throughput: 60, P50: 1500 * time.Microsecond, P99: lat(20), Max: lat(300), Cost: cost,
			CPU: cpuSpent{Self: 30 * lat(17), GC: 15 * time.Millisecond, Postgres: 30 * lat(1)}}}}),
		"CPU per record where measured; none for a scenario that was not (the batch mode)")
	tasks := func(scenario string, cpu, gc, pg, start float64) ReportRow {
		r := want(scenario, 40, 0)
		r.CPUMsPerItem, r.GCCPUMsPerItem, r.PostgresCPUMsPerItem, r.StartCPUMsPerItem = cpu, gc, pg, start
		return r
	}
	require.Equal(t, Report{Kind: "tasks", Rows: []ReportRow{tasks("bare", 12, 1, 0, 3), tasks("courier-postgres", 15, 0, 2.5, 0)}}, TasksReport(TasksRun{PerAttempt: []TaskResult{
		{Key: "bare", N: 30, PerSec: 40, P50: 1500 * time.Microsecond, P99: lat(20), Max: lat(300), Cost: cost,
			CPU: cpuSpent{Self: 30 * lat(12), GC: 30 * lat(1)}, StartCPU: 30 * lat(3)},
		{Key: "courier-postgres", N: 30, PerSec: 40, P50: 1500 * time.Microsecond, P99: lat(20), Max: lat(300), Cost: cost,
			CPU: cpuSpent{Self: 30 * lat(15), Postgres: 30 * 2500 * time.Microsecond}, StartCPU: 30 * lat(1)}}}),
		"CPU per task; the start's only for bare, whose starts courier makes inside its run")
	require.Equal(t, Report{Kind: "timers", Rows: []ReportRow{want("courier", 10, 2)}}, TimersReport([]TimerResult{
		{Key: "courier", N: 30, CreatePerSec: 10, P50: 1500 * time.Microsecond, P99: lat(20), Max: lat(300), Early: 2, Cost: cost}}))

	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, TimersReport(nil)))
	require.JSONEq(t, `{"kind":"timers","rows":[]}`, b.String(), "no results: an empty list, not null")
}
