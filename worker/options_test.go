package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Both workers that run workflows keep a run's next workflow task on its own worker's queue for
// StickyScheduleToStart, not the SDK's 5 s, and keep their pollers and slots.
func TestWorkflowWorkersOptions(t *testing.T) {
	t.Parallel()
	cfg := Config{ShutdownTimeout: DefaultShutdownTimeout, MaxConcurrentActivities: 150}
	w := workflowsWorkerOptions(cfg)
	require.Equal(t, StickyScheduleToStart, w.StickyScheduleToStartTimeout)
	require.Equal(t, 150, w.MaxConcurrentActivityExecutionSize)
	require.Zero(t, w.MaxConcurrentLocalActivityExecutionSize, "the SDK's 1,000 local slots: outbox first attempts share them with timers' reads")
	require.Equal(t, 8, w.MaxConcurrentWorkflowTaskPollers)
	require.Equal(t, DefaultShutdownTimeout, w.WorkerStopTimeout)

	cfg.Tasks.PushSlots = 40
	p := pushWorkerOptions(cfg)
	require.Equal(t, StickyScheduleToStart, p.StickyScheduleToStartTimeout)
	require.Equal(t, 40, p.MaxConcurrentActivityExecutionSize)
	require.Equal(t, 8, p.MaxConcurrentWorkflowTaskPollers)
}
