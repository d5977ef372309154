package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/courier-oss/courier/bench"
)

// `courier bench tasks --standalone --json` runs the engine's own job queue beside the bare
// baseline and courier: every task done by one standalone activity, never more at once than
// the limit, and one billable action per task (one attempt each) against a workflow's two.
func TestBenchTasksStandalone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the embedded Temporal server")
	}
	cmd := courierCmd(t, nil, "bench", "tasks", "--tasks", "40", "--limit", "4", "--work", "2ms", "--standalone", "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	var r bench.Report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "stdout: %s", stdout.String())
	rows := map[string]bench.ReportRow{}
	for _, row := range r.Rows {
		rows[row.Scenario] = row
	}
	sa, ok := rows["standalone"]
	require.True(t, ok, "a standalone row: %s", stdout.String())
	require.Equal(t, 40, sa.N)
	require.Positive(t, sa.ThroughputPerS)
	require.GreaterOrEqual(t, sa.P99Ms, sa.P50Ms)
	require.InDelta(t, 1.0, sa.ActionsPerItem, 0.01, "one attempt, one action, per task")
	require.Zero(t, sa.HistoryEventsPerItem, "no workflow history")
	bare := rows["bare"]
	require.GreaterOrEqual(t, bare.ActionsPerItem, 2.0, "a workflow with one activity: two actions")
	require.Contains(t, stderr.String(), "standalone activity")
}
