package relay

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus metrics. A nil *Metrics records
// nothing, so simulations pay for no atomics they do not read.
type Metrics struct {
	Published      prometheus.Counter
	ConfirmsFailed *prometheus.CounterVec
	LostLeases     prometheus.Counter
	Attempts       prometheus.Counter
	Parked         prometheus.Counter
	Swept          prometheus.Counter
	TickFailures   prometheus.Counter
	Backlog        prometheus.Gauge
	Faulted        prometheus.Gauge
	OldestEligible prometheus.Gauge
	TickDuration   prometheus.Histogram
}

// NewMetrics registers the relay's metrics with reg, labelled with the
// table they watch.
func NewMetrics(reg prometheus.Registerer, table string) *Metrics {
	labels := prometheus.Labels{"table": table}
	m := &Metrics{
		Published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_published_total", Help: "Rows published with a positive confirm and marked.", ConstLabels: labels}),
		ConfirmsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_confirms_failed_total", Help: "Publishes without a positive confirm, by class.", ConstLabels: labels}, []string{"class"}),
		LostLeases: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_lost_leases_total", Help: "Marks, retries or parks that found the lease lost.", ConstLabels: labels}),
		Attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_attempts_total", Help: "Row-level failures recorded as attempts.", ConstLabels: labels}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_parked_total", Help: "Rows parked (faulted) for an operator.", ConstLabels: labels}),
		Swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_swept_total", Help: "Processed rows deleted after retention.", ConstLabels: labels}),
		TickFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_tick_failures_total", Help: "Ticks that ended in an error.", ConstLabels: labels}),
		Backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_backlog", Help: "Pending rows.", ConstLabels: labels}),
		Faulted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_faulted", Help: "Faulted (parked) rows.", ConstLabels: labels}),
		OldestEligible: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_oldest_eligible_age_seconds", Help: "Age of the oldest eligible row by the database clock.", ConstLabels: labels}),
		TickDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_relay_tick_duration_seconds", Help: "Duration of one tick.", ConstLabels: labels,
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}),
	}
	reg.MustRegister(m.Published, m.ConfirmsFailed, m.LostLeases, m.Attempts, m.Parked, m.Swept,
		m.TickFailures, m.Backlog, m.Faulted, m.OldestEligible, m.TickDuration)
	return m
}
