package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
)

// DeliveryRuns looks at the delivery workflow runs of outbox records.
type DeliveryRuns struct {
	Temporal client.Client
	// Wait bounds how long WaitClosed waits for a run to close; default 5 s.
	Wait time.Duration
}

// WaitClosed returns nil once no run of the workflow is open. A record that has just gone dead
// is marked so by its run's last activity, a moment before that run closes: a redrive reopening
// the row meanwhile would have the relay attach the new delivery to the closing run, which then
// ends and leaves the row waiting for the orphan check. So a redrive first waits, up to Wait,
// for that run to close, and is a conflict (retry after a second) if it has not.
func (d DeliveryRuns) WaitClosed(ctx context.Context, workflowID string) error {
	wait := d.Wait
	if wait <= 0 {
		wait = 5 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		runID, open, err := d.openRun(wctx, workflowID)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case wctx.Err() != nil:
			return &courier.Error{Code: courier.CodeConflict, RetryAfter: time.Second,
				Message: fmt.Sprintf("the record's last delivery run (%s) is still open; redrive once it has closed", workflowID),
				Details: map[string]any{"workflow_id": workflowID}}
		case err != nil:
			return err
		case !open:
			return nil
		}
		// Get long-polls the run's history until it closes, however it closes. It can also
		// give up early (the long poll's own deadline, a transient error): the loop then asks
		// again whether the run is open, after a short pause so errors never spin.
		if err := d.Temporal.GetWorkflow(wctx, workflowID, runID).Get(wctx, nil); err != nil {
			select {
			case <-wctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// openRun returns the run id of the workflow's latest run and whether that run is open.
func (d DeliveryRuns) openRun(ctx context.Context, workflowID string) (string, bool, error) {
	desc, err := d.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("describe %s: %w", workflowID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	return info.GetExecution().GetRunId(), info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
