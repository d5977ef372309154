package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-oss/courier/health"
)

// healthCollector evaluates a role's readiness and reads its loops at scrape time.
type healthCollector struct {
	checks   func() []health.Check
	loops    []*health.Loop
	ready    *prometheus.Desc
	age      *prometheus.Desc
	interval *prometheus.Desc
}

// NewHealthCollector exports courier_ready{role} (1 when the role's readiness checks pass, as
// its /readyz would answer, else 0), evaluated at each scrape, and for each loop
// courier_loop_pass_age_seconds{loop} (how long ago it last completed a pass) and
// courier_loop_interval_seconds{loop} (how often it passes when healthy). role is "worker" or
// "gateway".
func NewHealthCollector(role string, checks func() []health.Check, loops []*health.Loop) prometheus.Collector {
	return &healthCollector{
		checks: checks, loops: loops,
		ready: prometheus.NewDesc("courier_ready", "1 while the process is ready (its /readyz answers 200): its dependencies answer and its loops pass; else 0.",
			nil, prometheus.Labels{"role": role}),
		age: prometheus.NewDesc("courier_loop_pass_age_seconds", "Seconds since the loop (relay:<source>, claimer) last completed a pass.",
			[]string{"loop"}, nil),
		interval: prometheus.NewDesc("courier_loop_interval_seconds", "How often the loop passes when healthy (its poll interval).",
			[]string{"loop"}, nil),
	}
}

// Describe names the loop series only for a role with loops, so that a worker's and a
// gateway's collectors can share one process's registry (courier dev).
func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ready
	if len(c.loops) > 0 {
		ch <- c.age
		ch <- c.interval
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if health.Evaluate(context.Background(), c.checks()).Ready {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, v)
	for _, l := range c.loops {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, l.SincePass().Seconds(), l.Name())
		ch <- prometheus.MustNewConstMetric(c.interval, prometheus.GaugeValue, l.Interval().Seconds(), l.Name())
	}
}
