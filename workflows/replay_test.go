package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/courier-oss/courier/workflows"
)

// Every recorded history under testdata/histories/<workflow>/ must replay against the current
// code; every history under testdata/histories/broken/ must fail. A change to a shipped
// workflow either keeps the first set replaying or adds workflow.GetVersion.
// Re-record with `make record-histories`.
func TestReplayRecordedHistories(t *testing.T) {
	root := filepath.Join("testdata", "histories")
	dirs, err := os.ReadDir(root)
	require.NoError(t, err)
	var good, broken int
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		files, err := filepath.Glob(filepath.Join(root, d.Name(), "*.json"))
		require.NoError(t, err)
		for _, f := range files {
			t.Run(d.Name()+"/"+filepath.Base(f), func(t *testing.T) {
				r := worker.NewWorkflowReplayer()
				workflows.Register(r)
				err := r.ReplayWorkflowHistoryFromJSONFile(nil, f)
				if d.Name() == "broken" {
					require.Error(t, err, "a deliberately incompatible history must fail replay")
					// Incompatible, not unreadable: a command that differs from the recorded
					// one, or a run that ends otherwise than its history (a local activity
					// the history has no marker for).
					require.Regexp(t, "nondeterministic|doesn't return the same result as the last event", err.Error(), "it must fail as incompatible, not as unreadable")
					broken++
					return
				}
				require.NoError(t, err)
				good++
			})
		}
	}
	require.GreaterOrEqual(t, good, 32, "recorded histories are missing; run make record-histories")
	require.GreaterOrEqual(t, broken, 2, "a broken history is missing")
}
