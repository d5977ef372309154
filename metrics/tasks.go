package metrics

import "github.com/prometheus/client_golang/prometheus"

// Tasks holds the prioritized-task metrics. A nil *Tasks records nothing.
type Tasks struct {
	// InsertToPush is courier_task_insert_to_push_seconds{queue}: observe it through
	// ObserveInsertToPush, which bounds the label.
	InsertToPush   *prometheus.HistogramVec
	Results        *prometheus.CounterVec // courier_task_results_total{queue,outcome}
	LimiterRepairs *prometheus.CounterVec // courier_task_limiter_repairs_total{queue}
	// PushToResult is courier_task_push_to_result_seconds{queue}: from an attempt's push to its
	// worker's result, as the gateway takes it.
	PushToResult *prometheus.HistogramVec
	queues       *labelBound
}

// ObserveInsertToPush records a task of queue whose first push was accepted seconds after its
// insert.
func (m *Tasks) ObserveInsertToPush(queue string, seconds float64) {
	m.InsertToPush.WithLabelValues(m.queues.value(queue)).Observe(seconds)
}

// NewTasks creates the task metrics and registers them with reg.
func NewTasks(reg prometheus.Registerer) *Tasks {
	m := &Tasks{
		InsertToPush:   histogramVec("courier_task_insert_to_push_seconds", "Time from a task's insert to its first push being accepted by a worker.", prometheus.ExponentialBuckets(0.005, 2, 18), "queue"),
		queues:         newLabelBound(MaxLabelValues),
		Results:        counterVec("courier_task_results_total", "Finished task attempts by queue and outcome (success, failure, timeout, cancelled).", "queue", "outcome"),
		LimiterRepairs: counterVec("courier_task_limiter_repairs_total", "Times the sweeper found a queue's slot count different from its rows in Processing and repaired it.", "queue"),
		PushToResult:   histogramVec("courier_task_push_to_result_seconds", "Time from an attempt's push to its worker's result (success or failure) reaching the gateway, by queue.", prometheus.ExponentialBuckets(0.01, 2, 18), "queue"),
	}
	if reg != nil {
		reg.MustRegister(m.InsertToPush, m.Results, m.LimiterRepairs, m.PushToResult)
	}
	return m
}

// TaskTableStats is a snapshot of the task tables for the scrape-time collector.
type TaskTableStats struct {
	ByQueueStatus map[string]map[string]int64
	InFlight      map[string]int64
	Limit         map[string]int64
}

type taskTable struct {
	stats             func() (TaskTableStats, error)
	tasks, inUse, lim *prometheus.Desc
	up                *prometheus.Desc
	statuses          []string
}

// NewTaskTableCollector exports courier_tasks{queue,status}, courier_task_slots_in_use{queue}
// and courier_task_slots_limit{queue}, read from the database at each scrape so they are true
// for the whole fleet.
func NewTaskTableCollector(statuses []string, stats func() (TaskTableStats, error)) prometheus.Collector {
	return &taskTable{
		stats:    stats,
		statuses: statuses,
		tasks:    prometheus.NewDesc("courier_tasks", "Tasks by queue and status.", []string{"queue", "status"}, nil),
		inUse:    prometheus.NewDesc("courier_task_slots_in_use", "Slots in use (tasks in Processing) per queue.", []string{"queue"}, nil),
		lim:      prometheus.NewDesc("courier_task_slots_limit", "Concurrency limit per queue.", []string{"queue"}, nil),
		up:       prometheus.NewDesc("courier_task_stats_up", "1 if the task tables could be read at this scrape.", nil, nil),
	}
}

func (c *taskTable) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tasks
	ch <- c.inUse
	ch <- c.lim
	ch <- c.up
}

func (c *taskTable) Collect(ch chan<- prometheus.Metric) {
	st, err := c.stats()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for q, by := range st.ByQueueStatus {
		for _, s := range c.statuses {
			ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(by[s]), q, s)
		}
	}
	for q, n := range st.InFlight {
		ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(n), q)
	}
	for q, n := range st.Limit {
		ch <- prometheus.MustNewConstMetric(c.lim, prometheus.GaugeValue, float64(n), q)
	}
}
