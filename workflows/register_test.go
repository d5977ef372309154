package workflows_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/courier-oss/courier"
	"github.com/courier-oss/courier/workflows"
)

// typeNames records the workflow types registered on it.
type typeNames []string

func (n *typeNames) RegisterWorkflowWithOptions(_ any, o workflow.RegisterOptions) {
	*n = append(*n, o.Name)
}

// Every kind's workflow type is registered, and nothing else: a worker (and the replayer) runs
// exactly the table's workflows.
func TestRegisterCoversTheKinds(t *testing.T) {
	var got typeNames
	workflows.Register(&got)
	var want []string
	for _, k := range courier.Kinds {
		if !slices.Contains(want, k.Workflow) {
			want = append(want, k.Workflow)
		}
	}
	require.ElementsMatch(t, want, []string(got))
}

// A run starts with its kind's search attributes, typed as courier registers them.
func TestStartAttributes(t *testing.T) {
	for _, k := range courier.Kinds {
		require.Equal(t, len(k.Attributes), workflows.StartAttributes(k, courier.RunAttributes{}).Size(), k.Name)
	}
	fire := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	sa := workflows.StartAttributes(courier.KindTask, courier.RunAttributes{TaskID: "doc-42", TaskVersion: 3, TaskPriority: 2,
		TaskQueue: "docparse", State: string(courier.TaskProcessing), BizType: "ignored"})
	require.Equal(t, 5, sa.Size(), "a task's five, nothing of another kind, and no state: a run that succeeds writes none")
	kw := func(sa temporal.SearchAttributes, name string) string {
		v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(name))
		require.True(t, ok, name)
		return v
	}
	num := func(name string) int64 {
		v, ok := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(name))
		require.True(t, ok, name)
		return v
	}
	require.Equal(t, "task", kw(sa, courier.SAKind))
	require.Equal(t, "doc-42", kw(sa, courier.SATaskID))
	require.Equal(t, int64(3), num(courier.SATaskVersion))
	require.Equal(t, int64(2), num(courier.SATaskPriority))
	require.Equal(t, "docparse", kw(sa, courier.SATaskQueue))
	_, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(courier.SAState))
	require.False(t, ok, "a task attempt starts without a state (ExecutionStatus Running says it)")
	_, ok = workflows.StartAttributes(courier.KindOutbox, courier.RunAttributes{Topic: "t", RecordID: 1, State: "dispatched"}).
		GetKeyword(temporal.NewSearchAttributeKeyKeyword(courier.SAState))
	require.False(t, ok, "a delivery starts without a state")

	sa = workflows.StartAttributes(courier.KindTimerBucket, courier.RunAttributes{BizType: "coupons", FireAt: fire})
	require.Equal(t, "timer-bucket", kw(sa, courier.SAKind))
	require.Equal(t, "coupons", kw(sa, courier.SABizType))
	var at time.Time
	at, ok = sa.GetTime(temporal.NewSearchAttributeKeyTime(courier.SAFireAt))
	require.True(t, ok)
	require.Equal(t, fire, at)
}
