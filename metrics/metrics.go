package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outbox holds the relay's delivery metrics. A nil *Outbox records nothing.
type Outbox struct {
	Published *prometheus.CounterVec // courier_outbox_published_total{source,topic}
	Dead      *prometheus.CounterVec // courier_outbox_dead_total{source,topic}
	Failures  *prometheus.CounterVec // courier_outbox_publish_failures_total{source,topic}
	// Latency is courier_outbox_commit_to_publish_seconds{source}: observe it through
	// ObserveLatency, which bounds the label.
	Latency *prometheus.HistogramVec
	sources *labelBound
}

// ObserveLatency records a record of source sent seconds after its commit.
func (m *Outbox) ObserveLatency(source string, seconds float64) {
	m.Latency.WithLabelValues(m.sources.value(source)).Observe(seconds)
}

// NewOutbox creates the outbox metrics and registers them with reg.
func NewOutbox(reg prometheus.Registerer) *Outbox {
	m := &Outbox{
		Published: counterVec("courier_outbox_published_total", "Outbox records published and acknowledged by the broker.", "source", "topic"),
		Dead:      counterVec("courier_outbox_dead_total", "Outbox records that spent their retry budget and were marked dead.", "source", "topic"),
		Failures:  counterVec("courier_outbox_publish_failures_total", "Failed publish attempts (each is retried per the retry policy).", "source", "topic"),
		Latency:   histogramVec("courier_outbox_commit_to_publish_seconds", "Time from the outbox row's created_at to the broker's acknowledgement.", prometheus.ExponentialBuckets(0.005, 2, 16), "source"),
		sources:   newLabelBound(MaxLabelValues),
	}
	if reg != nil {
		reg.MustRegister(m.Published, m.Dead, m.Failures, m.Latency)
	}
	return m
}

// OutboxTableStats is a snapshot of the outbox table for the scrape-time collector.
type OutboxTableStats struct {
	ByStatus     map[string]int64
	OldestUnsent float64 // age in seconds of the oldest pending or dispatched row; 0 if none
	BlockedKeys  int64   // ordered keys waiting on a dead record (ordered mode)
}

// outboxTable reads the outbox table at scrape time, so the gauges are true for the whole
// fleet, not for one process.
type outboxTable struct {
	stats   func() (OutboxTableStats, error)
	rows    *prometheus.Desc
	oldest  *prometheus.Desc
	blocked *prometheus.Desc
	up      *prometheus.Desc
}

// NewOutboxTableCollector exports courier_outbox_rows{source,status} and
// courier_outbox_oldest_unsent_age_seconds{source} and courier_outbox_blocked_keys{source},
// computed by stats at each scrape.
// The source label names the database (default: courier's own).
func NewOutboxTableCollector(source string, stats func() (OutboxTableStats, error)) prometheus.Collector {
	labels := prometheus.Labels{"source": source}
	return &outboxTable{
		stats:   stats,
		rows:    prometheus.NewDesc("courier_outbox_rows", "Outbox rows by status.", []string{"status"}, labels),
		oldest:  prometheus.NewDesc("courier_outbox_oldest_unsent_age_seconds", "Age of the oldest outbox row not yet sent (pending or dispatched).", nil, labels),
		blocked: prometheus.NewDesc("courier_outbox_blocked_keys", "Ordered keys waiting on a dead record until it is redriven or skipped (GET /v1/outbox/blocked-keys).", nil, labels),
		up:      prometheus.NewDesc("courier_outbox_stats_up", "1 if the outbox table could be read at this scrape.", nil, labels),
	}
}

func (c *outboxTable) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.rows
	ch <- c.oldest
	ch <- c.blocked
	ch <- c.up
}

func (c *outboxTable) Collect(ch chan<- prometheus.Metric) {
	st, err := c.stats()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, s := range []string{"pending", "dispatched", "sent", "dead"} {
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(st.ByStatus[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestUnsent)
	ch <- prometheus.MustNewConstMetric(c.blocked, prometheus.GaugeValue, float64(st.BlockedKeys))
}

// Timers holds the timer delivery metrics. A nil *Timers records nothing.
type Timers struct {
	// Lateness is courier_timer_fire_lateness_seconds{biz_type}: observe it through
	// ObserveLateness, which bounds the label.
	Lateness   *prometheus.HistogramVec
	Deliveries *prometheus.CounterVec // courier_timer_deliveries_total{biz_type,outcome}
	bizTypes   *labelBound
}

// ObserveLateness records a timer of bizType whose first delivery attempt began seconds after
// its fire time.
func (m *Timers) ObserveLateness(bizType string, seconds float64) {
	m.Lateness.WithLabelValues(m.bizTypes.value(bizType)).Observe(seconds)
}

// NewTimers creates the timer metrics and registers them with reg.
func NewTimers(reg prometheus.Registerer) *Timers {
	m := &Timers{
		Lateness:   histogramVec("courier_timer_fire_lateness_seconds", "Time from a timer's fire_at to its first delivery attempt.", prometheus.ExponentialBuckets(0.01, 2, 14), "biz_type"),
		bizTypes:   newLabelBound(MaxLabelValues),
		Deliveries: counterVec("courier_timer_deliveries_total", "Timer delivery attempts by business type and outcome (delivered, retry, failed).", "biz_type", "outcome"),
	}
	if reg != nil {
		reg.MustRegister(m.Lateness, m.Deliveries)
	}
	return m
}

// timerStates reads timer counts by state at scrape time.
type timerStates struct {
	count func() (map[string]int64, error)
	desc  *prometheus.Desc
}

// NewTimerStateCollector exports courier_timers{state}, counted from Temporal's visibility
// store at each scrape.
func NewTimerStateCollector(count func() (map[string]int64, error)) prometheus.Collector {
	return &timerStates{count: count, desc: prometheus.NewDesc("courier_timers", "Timers by state.", []string{"state"}, nil)}
}

func (c *timerStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *timerStates) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.count()
	if err != nil {
		return
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// counterVec is a counter by labels, with its name and help.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// gaugeVec is a gauge by labels, with its name and help.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// histogramVec is a histogram by labels, with its name, help and buckets.
func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
