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
