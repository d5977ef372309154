package metrics

import "github.com/prometheus/client_golang/prometheus"

// Admission refusal reasons, the values of the reason label.
const (
	RefusedKeyRate     = "key_rate"      // an API key's request rate
	RefusedBizTypeRate = "biz_type_rate" // a business type's timer insert rate
	RefusedQueueRate   = "queue_rate"    // a queue's task insert rate
	RefusedBacklog     = "backlog"       // a queue's backlog budget (max_pending)
)

// Admission counts what the gateway's admission control refused. A nil *Admission records
// nothing.
type Admission struct {
	// Refused is courier_admission_refused_total{reason,name}: name is the API key id, the
	// business type or the queue the limit belongs to.
	Refused *prometheus.CounterVec
}

// NewAdmission creates the admission metrics and registers them with reg.
func NewAdmission(reg prometheus.Registerer) *Admission {
	m := &Admission{Refused: counterVec("courier_admission_refused_total", "Requests refused with 429 by admission control, by reason (key_rate, biz_type_rate, queue_rate, backlog) and the key id, business type or queue whose limit refused them.", "reason", "name")}
	if reg != nil {
		reg.MustRegister(m.Refused)
	}
	return m
}

// Refuse counts one refusal.
func (m *Admission) Refuse(reason, name string) {
	if m == nil {
		return
	}
	m.Refused.WithLabelValues(reason, name).Inc()
}
