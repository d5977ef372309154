package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/bench"
)

// `courier bench outbox --json` writes exactly one JSON object to stdout: the bare baseline
// and courier on SQLite, each with its rate, latencies and the history events each item cost,
// read back from the histories it produced.
func TestBenchJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	cmd := courierCmd(t, nil, "bench", "outbox", "--rows", "30", "--rate", "60", "--batch-rows", "300", "--batch-rate", "1000", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())

	dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
	dec.DisallowUnknownFields()
	var r bench.Report
	require.NoError(t, dec.Decode(&r), "stdout: %s", stdout.String())
	require.False(t, dec.More(), "exactly one JSON object on stdout: %s", stdout.String())
	require.Equal(t, "outbox", r.Kind)
	require.Len(t, r.Rows, 3)
	batch := r.Rows[2]
	require.Equal(t, "courier-batch-sqlite", batch.Scenario)
	require.Equal(t, 300, batch.N)
	require.Positive(t, batch.ThroughputPerS)
	require.GreaterOrEqual(t, batch.P99Ms, batch.P50Ms)
	require.Positive(t, batch.HistoryEventsPerItem, "the batch workflows' events, shared by their records")
	require.Less(t, batch.HistoryEventsPerItem, 11.0, "a batch costs less per record than a workflow per record")
	for i, want := range []string{"bare", "courier-sqlite"} {
		row := r.Rows[i]
		require.Equal(t, want, row.Scenario)
		require.Equal(t, 30, row.N)
		require.Positive(t, row.ThroughputPerS, want)
		require.Positive(t, row.P50Ms, want)
		require.GreaterOrEqual(t, row.P99Ms, row.P50Ms, want)
		require.GreaterOrEqual(t, row.MaxMs, row.P99Ms, want)
		require.GreaterOrEqual(t, row.ActionsPerItem, 2.0, want)
	}
	// A workflow with one activity has at least started, task scheduled/started/completed,
	// activity scheduled/started/completed, and completed: 11 events or more. A record published
	// at its first attempt, a local activity, has started, one workflow task, its marker and
	// completed: 6.
	require.GreaterOrEqual(t, r.Rows[0].HistoryEventsPerItem, 11.0)
	require.GreaterOrEqual(t, r.Rows[1].HistoryEventsPerItem, 6.0)
	require.Less(t, r.Rows[1].HistoryEventsPerItem, r.Rows[0].HistoryEventsPerItem, "a record costs fewer events than bare's one-activity workflow")
	require.Contains(t, stderr.String(), "| scenario |", "the human tables go to stderr")
}

// `courier bench tasks --mode batched --json` runs the batched mode's burn-down and steady
// scenarios and reports, per scenario, the rate end to end, both latencies, the engine's cost
// per task, and that nothing was lost nor held past the limit at the worker; a River that
// cannot run is a note, not a failure.
func TestBenchTasksBatchedJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	cmd := courierCmd(t, nil, "bench", "tasks", "--mode", "batched", "--batched-tasks", "200", "--steady-tasks", "100", "--rate", "200",
		"--batched-limit", "50", "--push-batch-size", "20", "--river-dir", t.TempDir(), "--postgres-url", "", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())

	dec := json.NewDecoder(bytes.NewReader(stdout.Bytes()))
	dec.DisallowUnknownFields()
	var r bench.Report
	require.NoError(t, dec.Decode(&r), "stdout: %s", stdout.String())
	require.False(t, dec.More(), "exactly one JSON object on stdout: %s", stdout.String())
	require.Equal(t, "tasks", r.Kind)
	require.Len(t, r.Rows, 2, "burn-down and steady on SQLite; River needs PostgreSQL")
	for i, want := range []struct {
		scenario, load string
		n              int
	}{
		{"courier-batched-sqlite", bench.LoadBurnDown, 200}, {"courier-batched-sqlite-steady", bench.LoadSteady, 100},
	} {
		row := r.Rows[i]
		require.Equal(t, want.scenario, row.Scenario)
		require.Equal(t, "batched", row.Mode)
		require.Equal(t, want.load, row.Load)
		require.Equal(t, want.n, row.N)
		require.Equal(t, 50, row.Limit)
		require.Positive(t, row.ThroughputPerS, want.scenario)
		require.Positive(t, row.InsertPerS, want.scenario)
		require.GreaterOrEqual(t, row.P99Ms, row.P50Ms, want.scenario)
		require.Positive(t, row.PushToSuccessP50Ms, want.scenario)
		require.GreaterOrEqual(t, row.PushToSuccessP99Ms, row.PushToSuccessP50Ms, want.scenario)
		require.NotNil(t, row.Lost, want.scenario)
		require.Zero(t, *row.Lost, "%s: every task Success", want.scenario)
		require.NotNil(t, row.OverLimit, want.scenario)
		require.Zero(t, *row.OverLimit, "%s: the worker never held more than the limit", want.scenario)
		require.NotNil(t, row.MaxHeld, want.scenario)
		require.LessOrEqual(t, *row.MaxHeld, 50, want.scenario)
		require.Positive(t, *row.MaxHeld, want.scenario)
		require.Positive(t, row.Batches, want.scenario)
		require.Positive(t, row.Pushes, want.scenario)
		// A batch run's few events and actions are shared by its tasks: below the per-attempt
		// mode's 12 events and 4 actions a task even when a steady trickle is claimed a few
		// tasks at a time (how many depends on the machine's speed), and far below them in a
		// burn-down, whose claims are full.
		require.Positive(t, row.HistoryEventsPerItem, want.scenario)
		require.Less(t, row.HistoryEventsPerItem, 12.0, want.scenario)
		require.Less(t, row.ActionsPerItem, 4.0, want.scenario)
		if want.load == bench.LoadBurnDown {
			require.Less(t, row.HistoryEventsPerItem, 2.0, want.scenario)
			require.Less(t, row.ActionsPerItem, 1.0, want.scenario)
		}
	}
	require.Len(t, r.Notes, 1)
	require.Contains(t, r.Notes[0], "river not run")
	require.Contains(t, stderr.String(), "| courier batched, burn-down, sqlite |", "the human table goes to stderr")
}
