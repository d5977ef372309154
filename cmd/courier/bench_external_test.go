package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier/bench"
	"github.com/courier-oss/courier/devstack"
)

// `courier bench tasks --temporal-address` runs its scenarios, the bare baseline too, on the
// Temporal server at that address (here another process's embedded server standing in for a
// cluster, created without courier's search attributes, as a cluster may be): the runs are in
// that server's namespace afterwards.
func TestBenchOnAnExternalTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Temporal server")
	}
	tmp, err := devstack.StartTemporal(t.Context(), devstack.Config{DataDir: t.TempDir(), TemporalPort: -1, DisableUI: true})
	require.NoError(t, err)
	t.Cleanup(tmp.Stop)

	cmd := courierCmd(t, nil, "bench", "tasks", "--tasks", "20", "--limit", "5", "--work", "1ms",
		"--temporal-address", tmp.Address(), "--temporal-namespace", tmp.Namespace(), "--json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
	var r bench.Report
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "stdout: %s", stdout.String())
	require.Len(t, r.Rows, 2)
	require.Equal(t, "bare", r.Rows[0].Scenario)
	require.Equal(t, "courier-sqlite", r.Rows[1].Scenario)

	tc, err := client.Dial(client.Options{HostPort: tmp.Address(), Namespace: tmp.Namespace()})
	require.NoError(t, err)
	defer tc.Close()
	for _, row := range r.Rows {
		require.Equal(t, 20, row.N, row.Scenario)
	}
	// Every task of both scenarios ran as a workflow on this server: 20 bare ones and at least
	// 20 courier attempts.
	resp, err := tc.CountWorkflow(t.Context(), &workflowservice.CountWorkflowExecutionsRequest{Namespace: tmp.Namespace(),
		Query: "ExecutionStatus = 'Completed'"})
	require.NoError(t, err)
	require.GreaterOrEqual(t, resp.GetCount(), int64(40), "the bench's runs are on the external server")
}
