package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/courier-oss/courier"
)

// The recorded runs started as the relay and the claimer start them now (QuietSuccess): a sent
// record's delivery and a successful task attempt start without a CourierState and write none,
// so they cost what they cost before the final state was written (a delivery 6 events, an
// attempt 12 without a heartbeat timeout and 11 with one); a run that ends otherwise writes its
// state once, as its last search-attribute change. The runs recorded with FinalState alone wrote
// one for a success too (13 events; the 7th of a delivery).
func TestRecordedStateUpserts(t *testing.T) {
	for _, c := range []struct {
		file   string
		events int
		state  string // "" for none
	}{
		{"outbox-delivery/sent-quiet-success.json", 6, ""},
		{"outbox-delivery/dead-unknown-topic-quiet-success.json", 0, string(courier.OutboxDead)},
		{"outbox-delivery/paused-quiet-success.json", 0, string(courier.OutboxPending)},
		{"outbox-delivery/sent-final-state.json", 7, string(courier.OutboxSent)},
		{"task/quiet-success.json", 12, ""},
		{"task/quiet-heartbeat-success.json", 11, ""},
		{"task/quiet-failed.json", 0, string(courier.TaskFailed)},
		{"task/quiet-cancelled.json", 0, string(courier.TaskCancelled)},
		{"task/success-final-state.json", 13, string(courier.TaskSuccess)},
	} {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "histories", c.file))
			require.NoError(t, err)
			defer f.Close()
			hist, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			require.NoError(t, err)
			var states []string
			for _, ev := range hist.GetEvents() {
				if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil && c.state == "" {
					_, ok := a.GetSearchAttributes().GetIndexedFields()[courier.SAState]
					require.False(t, ok, "a run that succeeds starts without a state")
				}
				if a := ev.GetUpsertWorkflowSearchAttributesEventAttributes(); a != nil {
					p, ok := a.GetSearchAttributes().GetIndexedFields()[courier.SAState]
					require.True(t, ok, "an upsert of the state")
					var s string
					require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &s))
					states = append(states, s)
				}
			}
			if c.state == "" {
				require.Empty(t, states, "a success writes no state")
				last := hist.GetEvents()[len(hist.GetEvents())-1]
				require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, last.GetEventType(), "Completed says the success")
			} else {
				require.Equal(t, []string{c.state}, states, "the final state, once")
			}
			if c.events > 0 {
				require.Len(t, hist.GetEvents(), c.events)
			}
		})
	}
}
