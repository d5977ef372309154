package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// A courier item is done for its user before its run has closed (a task's row says Success, an
// outbox record is at the consumer, and the run ends a workflow task later), and under load the
// last runs closed seconds after the last item (58 s in one outbox run, before courier's
// // workers waited 20 s for a cached run's next workflow task: worker.StickyScheduleToStart). The
// bare scenarios' time ends with their last workflow's close, so courier's ends only once its
// runs have closed too: the engine's work for the last items is inside the measured time on
// both sides. Both read the close times the server recorded: a client waiting for a result can
// hear of it up to 20 s late (the engine's long-poll expiry, when a wake-up is missed).

// waitRunsClosed waits until no run of workflowType is open in the namespace, as the engine's
// visibility store says: it trails a close by a moment, so the wait ends at or after the last
// close. It asks one count every 20 ms, not each run, so the wait adds little work of its own to
// CPU measured until it returns.
func waitRunsClosed(ctx context.Context, tc client.Client, namespace, workflowType string) error {
	for {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace,
			Query: fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running'", workflowType)})
		if err != nil {
			return fmt.Errorf("count open %s runs: %w", workflowType, err)
		}
		if resp.GetCount() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d %s runs still open: %w", resp.GetCount(), workflowType, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastClose returns when the last of the latest runs of ids closed, by the server's clock (the
// same host's), waiting for any still open (asking it again every 20 ms).
func lastClose(ctx context.Context, tc client.Client, ids []string) (time.Time, error) {
	closed, err := closeTimes(ctx, tc, ids)
	var last time.Time
	for _, at := range closed {
		last = later(last, at)
	}
	return last, err
}

// closeTimes returns when the latest run of each of ids closed, by the server's clock, waiting
// for any still open (asking it again every 20 ms).
func closeTimes(ctx context.Context, tc client.Client, ids []string) ([]time.Time, error) {
	closed := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		for {
			d, err := tc.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				return nil, fmt.Errorf("describe %s: %w", id, err)
			}
			info := d.GetWorkflowExecutionInfo()
			if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				closed = append(closed, info.GetCloseTime().AsTime())
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("run %s still open: %w", id, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return closed, nil
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
