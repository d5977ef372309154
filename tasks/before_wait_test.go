package tasks

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"

	"github.com/courier-oss/courier/activities/contract"
	"github.com/courier-oss/courier/workflows"
)

// A heartbeat that finds no open wait is accepted only while the attempt's run is before its
// wait: a version-1 run (the push and the wait are two activities) that runs and is not
// recording an outcome. From version 2 on the wait is the activity that pushes, open from the
// run's start, so finding it gone means the attempt is over, whatever else the run shows.
func TestBeforeWait(t *testing.T) {
	t.Parallel()
	running, closed := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	describe := func(status enumspb.WorkflowExecutionStatus, version int, pending ...string) *workflowservice.DescribeWorkflowExecutionResponse {
		info := &workflowpb.WorkflowExecutionInfo{Status: status}
		if version > 0 {
			p, err := converter.GetDefaultDataConverter().ToPayload(version)
			require.NoError(t, err)
			info.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{codeVersionMemo: p}}
		}
		d := &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}
		for _, name := range pending {
			d.PendingActivities = append(d.PendingActivities, &workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: name}})
		}
		return d
	}
	for _, c := range []struct {
		name string
		resp *workflowservice.DescribeWorkflowExecutionResponse
		err  error
		want bool
	}{
		{"version 1, pushing", describe(running, 1, contract.SendPushName), nil, true},
		{"a run from before the version memo", describe(running, 0), nil, true},
		{"version 1, recording its outcome", describe(running, 1, contract.FinishTaskName), nil, false},
		{"version 1, closed", describe(closed, 1), nil, false},
		{"version 2, its wait gone", describe(running, workflows.TaskPushAwaitV), nil, false},
		{"version 3, its wait gone", describe(running, workflows.TaskOnPushQueueV), nil, false},
		{"version 4, its wait gone", describe(running, workflows.TaskRecordedV), nil, false},
		{"the run cannot be described", nil, errors.New("unavailable"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tc := mocks.NewClient(t)
			tc.On("DescribeWorkflowExecution", mock.Anything, "task/t-1/1", "run-1").Return(c.resp, c.err).Once()
			s := &Service{tc: tc}
			require.Equal(t, c.want, s.beforeWait(t.Context(), "task/t-1/1", "run-1"))
		})
	}
}

// An attempt with a heartbeat timeout needs an activity its heartbeats extend: the claimer
// starts it at version 4 even when told to start version 5; every other choice stands.
func TestAttemptCodeVersion(t *testing.T) {
	require.Equal(t, workflows.TaskRecordedV, AttemptCodeVersion(workflows.TaskLocalPushV, time.Second))
	require.Equal(t, workflows.TaskLocalPushV, AttemptCodeVersion(workflows.TaskLocalPushV, 0))
	require.Equal(t, workflows.TaskOnPushQueueV, AttemptCodeVersion(workflows.TaskOnPushQueueV, time.Second), "an older pinned version is kept")
	require.Equal(t, 1, AttemptCodeVersion(1, 0))
}
