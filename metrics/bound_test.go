package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The latency histograms carry their source, queue or business type, and a process gives each
// label at most MaxLabelValues values: the values past the bound are counted as "_other", so
// queues or business types created by the thousand cannot flood Prometheus.
func TestLatencyHistogramLabelsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, tm, tk := NewOutbox(reg), NewTimers(reg), NewTasks(reg)
	for i := range MaxLabelValues + 20 {
		q := fmt.Sprintf("q%d", i)
		tk.ObserveInsertToPush(q, 0.1)
		tk.ObserveInsertToPush(q, 0.2)
		tm.ObserveLateness("type-"+q, 0.01)
	}
	o.ObserveLatency("default", 0.05)
	o.ObserveLatency("accounts", 0.05)

	families, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]map[string]uint64{} // family → label value → samples
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetHistogram() == nil {
				continue
			}
			if counts[f.GetName()] == nil {
				counts[f.GetName()] = map[string]uint64{}
			}
			require.Len(t, m.GetLabel(), 1, f.GetName())
			counts[f.GetName()][m.GetLabel()[0].GetName()+"="+m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
		}
	}
	push := counts["courier_task_insert_to_push_seconds"]
	require.Len(t, push, MaxLabelValues+1)
	require.Len(t, counts["courier_timer_fire_lateness_seconds"], MaxLabelValues+1)
	// A value seen before the bound keeps its own series; the 20 past it share "_other".
	require.Equal(t, uint64(2), push["queue=q0"])
	require.Equal(t, uint64(2*20), push["queue="+OtherLabelValue])
	require.Equal(t, uint64(20), counts["courier_timer_fire_lateness_seconds"]["biz_type="+OtherLabelValue])
	require.Equal(t, map[string]uint64{"source=default": 1, "source=accounts": 1}, counts["courier_outbox_commit_to_publish_seconds"])
}
