package metrics

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courier-oss/courier/mq"
)

// Brokers holds the per-broker publish metrics; it is the mq.Router's observer. A nil *Brokers
// records nothing.
type Brokers struct {
	Acked         *prometheus.CounterVec   // courier_broker_published_total{broker}
	Errors        *prometheus.CounterVec   // courier_broker_publish_errors_total{broker,reason}
	Latency       *prometheus.HistogramVec // courier_broker_publish_seconds{broker}
	UpGauge       *prometheus.GaugeVec     // courier_broker_up{broker}
	InFlightGauge *prometheus.GaugeVec     // courier_broker_publishes_in_flight{broker}
	NoRoute       prometheus.Counter       // courier_broker_unroutable_total
}

// Reasons of courier_broker_publish_errors_total.
const (
	ReasonDown         = "down"          // refused at once: the broker failed its last health check
	ReasonBusy         = "busy"          // refused at once: the broker's publishes in flight are at their bound
	ReasonUnknownTopic = "unknown_topic" // the broker has no destination for the topic
	ReasonRefused      = "refused"       // the message breaks courier's message rule
	ReasonError        = "error"         // anything else (unreachable, timeout, nack): retried
)

// NewBrokers creates the broker metrics, with a zero series for each named broker (up starts
// at 1 until a health check says otherwise), and registers them with reg.
func NewBrokers(reg prometheus.Registerer, names []string) *Brokers {
	m := &Brokers{
		Acked:         counterVec("courier_broker_published_total", "Messages the broker acknowledged (outbox records and timer deliveries), by broker.", "broker"),
		Errors:        counterVec("courier_broker_publish_errors_total", "Failed publishes by broker and reason (down, busy, unknown_topic, refused, error).", "broker", "reason"),
		Latency:       histogramVec("courier_broker_publish_seconds", "Time from a publish to the broker's answer (acknowledgement or error), by broker.", prometheus.ExponentialBuckets(0.0005, 2, 16), "broker"),
		UpGauge:       gaugeVec("courier_broker_up", "1 if the broker passed its last health check, 0 if it failed it.", "broker"),
		InFlightGauge: gaugeVec("courier_broker_publishes_in_flight", "Publishes waiting for the broker's answer in this process, by broker.", "broker"),
		NoRoute: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "courier_broker_unroutable_total",
			Help: "Publishes of a topic that no route matches, with no default broker (the record goes dead).",
		}),
	}
	for _, n := range names {
		m.Acked.WithLabelValues(n)
		m.Latency.WithLabelValues(n)
		m.UpGauge.WithLabelValues(n).Set(1)
		m.InFlightGauge.WithLabelValues(n)
	}
	if reg != nil {
		reg.MustRegister(m.Acked, m.Errors, m.Latency, m.UpGauge, m.InFlightGauge, m.NoRoute)
	}
	return m
}

// Published counts one publish and, when it reached the broker, its latency.
func (m *Brokers) Published(broker string, d time.Duration, err error) {
	if m == nil {
		return
	}
	reason := ""
	switch {
	case err == nil:
		m.Acked.WithLabelValues(broker).Inc()
	case errors.Is(err, mq.ErrBrokerDown):
		reason = ReasonDown
	case errors.Is(err, mq.ErrBrokerBusy):
		reason = ReasonBusy
	case errors.Is(err, mq.ErrUnknownTopic):
		reason = ReasonUnknownTopic
	case errors.Is(err, mq.ErrRefused):
		reason = ReasonRefused
	default:
		reason = ReasonError
	}
	if reason != "" {
		m.Errors.WithLabelValues(broker, reason).Inc()
	}
	if reason != ReasonDown && reason != ReasonBusy {
		m.Latency.WithLabelValues(broker).Observe(d.Seconds())
	}
}

// InFlight sets the broker's publishes in flight.
func (m *Brokers) InFlight(broker string, n int) {
	if m == nil {
		return
	}
	m.InFlightGauge.WithLabelValues(broker).Set(float64(n))
}

// BrokerUp records a health check's outcome.
func (m *Brokers) BrokerUp(broker string, up bool) {
	if m == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	m.UpGauge.WithLabelValues(broker).Set(v)
}

// Unroutable counts a publish no broker routes.
func (m *Brokers) Unroutable() {
	if m == nil {
		return
	}
	m.NoRoute.Inc()
}
