package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-oss/courier"
)

// taskBacklog reads every queue's pending tasks by priority at scrape time, so the gauges are
// true for the whole fleet.
type taskBacklog struct {
	read    func() ([]courier.QueueBacklog, error)
	now     func() time.Time
	pending *prometheus.Desc
	oldest  *prometheus.Desc
}

// NewTaskBacklogCollector exports courier_task_pending{queue,priority} (pending tasks by
// priority band, those waiting for a retry included) and
// courier_task_oldest_pending_age_seconds{queue} (0 when none is pending), computed by read at
// each scrape. A scrape whose read fails exports neither (courier_task_stats_up says so).
func NewTaskBacklogCollector(read func() ([]courier.QueueBacklog, error)) prometheus.Collector {
	return &taskBacklog{
		read: read,
		now:  time.Now,
		pending: prometheus.NewDesc("courier_task_pending", "Pending tasks by queue and priority (1 high … 5 low), those waiting for a retry included.",
			[]string{"queue", "priority"}, nil),
		oldest: prometheus.NewDesc("courier_task_oldest_pending_age_seconds", "Age of the oldest pending task per queue; 0 when none is pending.",
			[]string{"queue"}, nil),
	}
}

func (c *taskBacklog) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.oldest
}

func (c *taskBacklog) Collect(ch chan<- prometheus.Metric) {
	backlogs, err := c.read()
	if err != nil {
		return
	}
	now := c.now()
	for _, b := range backlogs {
		for i, n := range b.Pending {
			ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n), b.Queue, strconv.Itoa(i+1))
		}
		age := 0.0
		if !b.OldestPending.IsZero() {
			age = max(0, now.Sub(b.OldestPending).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, b.Queue)
	}
}
