package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-oss/courier"
)

// pausedCollector reads the pauses in force at scrape time.
type pausedCollector struct {
	read   func() ([]courier.Pause, error)
	paused *prometheus.Desc
	since  *prometheus.Desc
}

// NewPausedCollector exports courier_paused{kind,name} (1 for each task queue, business type
// and outbox topic pattern paused) and courier_paused_since_seconds{kind,name} (the Unix time
// it was paused), read at each scrape. A scrape whose read fails exports neither.
func NewPausedCollector(read func() ([]courier.Pause, error)) prometheus.Collector {
	return &pausedCollector{
		read: read,
		paused: prometheus.NewDesc("courier_paused", "1 for each paused task queue (kind queue), business type (biz_type) and outbox topic pattern (topic).",
			[]string{"kind", "name"}, nil),
		since: prometheus.NewDesc("courier_paused_since_seconds", "When each pause began, as a Unix time.",
			[]string{"kind", "name"}, nil),
	}
}

func (c *pausedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.paused
	ch <- c.since
}

func (c *pausedCollector) Collect(ch chan<- prometheus.Metric) {
	list, err := c.read()
	if err != nil {
		return
	}
	for _, p := range list {
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, 1, string(p.Kind), p.Name)
		ch <- prometheus.MustNewConstMetric(c.since, prometheus.GaugeValue, float64(p.PausedAt.UnixMilli())/1000, string(p.Kind), p.Name)
	}
}
