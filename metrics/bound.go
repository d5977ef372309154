package metrics

import "sync"

// MaxLabelValues bounds how many distinct values one process gives the source, queue or
// biz_type label of a latency histogram (courier_outbox_commit_to_publish_seconds,
// courier_task_insert_to_push_seconds, courier_timer_fire_lateness_seconds). Sources are
// configured, but queues and business types are data an admin creates through the API, and each
// value costs a histogram's worth of series; past the bound, further values are counted under
// OtherLabelValue. docs/operations.md, "Metrics".
const MaxLabelValues = 100

// OtherLabelValue stands for every label value past MaxLabelValues.
const OtherLabelValue = "_other"

// labelBound keeps the first MaxLabelValues values of one label and folds the rest.
type labelBound struct {
	mu   sync.Mutex
	seen map[string]struct{}
	max  int
}

func newLabelBound(max int) *labelBound {
	return &labelBound{seen: map[string]struct{}{}, max: max}
}

// value is v if it is among the first max values seen, else OtherLabelValue.
func (b *labelBound) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return OtherLabelValue
	}
	b.seen[v] = struct{}{}
	return v
}
