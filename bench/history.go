package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/courier-oss/courier"
)

// Cost is what the items of a scenario cost the engine, read back from their histories: events
// per item, and Temporal Cloud billable actions per item.
type Cost struct {
	Events  float64 // history events per item
	Actions float64 // billable actions per item (see actionsOf)
	Sampled int     // how many items' histories were read
}

// costSample bounds how many histories a scenario reads: enough for a stable mean of items that
// all run the same code, few enough to stay a small part of the benchmark.
const costSample = 40

// measureCost reads the histories of up to costSample of the workflow ids (spread evenly over
// the list; the latest run of each, following continue-as-new) and averages them.
func measureCost(ctx context.Context, tc client.Client, ids []string) (Cost, error) {
	if len(ids) == 0 {
		return Cost{}, nil
	}
	step := max(1, len(ids)/costSample)
	var c Cost
	var events, actions int
	for i := 0; i < len(ids) && c.Sampled < costSample; i += step {
		e, a, err := historyCost(ctx, tc, ids[i])
		if err != nil {
			return Cost{}, fmt.Errorf("history of %s: %w", ids[i], err)
		}
		events += e
		actions += a
		c.Sampled++
	}
	c.Events = float64(events) / float64(c.Sampled)
	c.Actions = float64(actions) / float64(c.Sampled)
	return c, nil
}

// historyCost counts the events and actions of every run of one workflow id, from the first
// run to the latest (a run that continued as new is the same item).
func historyCost(ctx context.Context, tc client.Client, id string) (events, actions int, err error) {
	runID := ""
	for {
		it := tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		next := ""
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return 0, 0, err
			}
			events++
			actions += actionsOf(ev)
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil && runID == "" {
				// The first history read is the latest run; walk back to the first so that an
				// item that continued as new is counted whole.
				if prev := a.GetContinuedExecutionRunId(); prev != "" {
					next = prev
				}
			}
		}
		if next == "" {
			return events, actions, nil
		}
		runID = next
	}
}

// actionsOf counts the Temporal Cloud billable actions an event stands for, by Temporal's
// published rules (https://docs.temporal.io/cloud/actions): a workflow started (also by
// continue-as-new), an activity started or retried (each attempt: the started event records the
// last attempt's number), a timer started, a signal or update received, a search attribute
// upsert, a local activity (counted per marker here; Temporal counts the local activities of
// one workflow task together, so this is an upper bound), a child workflow started, a signal
// sent. Heartbeats that reach the server also count but leave no event, so they are not
// included.
func actionsOf(ev *historypb.HistoryEvent) int {
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		enumspb.EVENT_TYPE_TIMER_STARTED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
		enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
		enumspb.EVENT_TYPE_MARKER_RECORDED,
		enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
		enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
		return 1
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		return int(max(1, ev.GetActivityTaskStartedEventAttributes().GetAttempt()))
	}
	return 0
}

// batchCost is what the batch mode costs per record: the batch workflows of source, found by
// their search attributes, their mean cost read from a sample, times their number, over the
// records they carried.
func batchCost(ctx context.Context, tc client.Client, source string, records int) (Cost, error) {
	// Visibility trails the runs by a moment: let the last batches' records reach it.
	select {
	case <-ctx.Done():
		return Cost{}, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	query := fmt.Sprintf("%s AND %s = '%s'", courier.KindOutboxBatch.Query(), courier.SASource, source)
	var ids []string
	var token []byte
	for {
		// Small pages: the embedded SQLite visibility store filters on search attributes
		// without an index, and a page of the server's default 1,000 of thousands of batch
		// runs outlasted the client's 10 s call timeout.
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 100})
		if err != nil {
			return Cost{}, fmt.Errorf("list batch workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			ids = append(ids, e.GetExecution().GetWorkflowId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	c, err := measureCost(ctx, tc, ids)
	if err != nil || records == 0 {
		return c, err
	}
	per := float64(len(ids)) / float64(records)
	c.Events *= per
	c.Actions *= per
	return c, nil
}

// orderedCost is the engine's cost per record of the ordered mode: the events and actions of
// every run of the source's key deliveries (each key runs again whenever new records come),
// divided by the records they delivered.
func orderedCost(ctx context.Context, tc client.Client, source string, records int) (Cost, error) {
	select { // visibility trails the runs by a moment
	case <-ctx.Done():
		return Cost{}, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	query := fmt.Sprintf("%s AND %s = '%s'", courier.KindOutboxKey.Query(), courier.SASource, source)
	var (
		c      Cost
		events int
		acts   int
		token  []byte
	)
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 100})
		if err != nil {
			return Cost{}, fmt.Errorf("list key deliveries: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			it := tc.GetWorkflowHistory(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return Cost{}, err
				}
				events++
				acts += actionsOf(ev)
			}
			c.Sampled++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	if records > 0 {
		c.Events = float64(events) / float64(records)
		c.Actions = float64(acts) / float64(records)
	}
	return c, nil
}
