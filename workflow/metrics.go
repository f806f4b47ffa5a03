package workflow

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
)

// metrics are the Prometheus metrics of one Workflows; all methods are
// no-ops on a nil *metrics (no Registerer).
//
//	leasehold_workflow_transitions_total{workflow,strategy,outcome}
//	leasehold_workflow_conflicts_total{workflow}
//	leasehold_workflow_strategy_switches_total{workflow,to}
//	leasehold_workflow_instance_strategy{workflow,instance,strategy}   1 for the strategy in use (Adaptive)
//	leasehold_workflow_instance_conflict_rate{workflow,instance}       over the sliding window (Adaptive)
type metrics struct {
	name        string
	transitions *prometheus.CounterVec
	conflicts   prometheus.Counter
	switches    *prometheus.CounterVec
	strategy    *prometheus.GaugeVec
	rate        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	// opts names a metric of this workflow.
	opts := func(metric, help string) prometheus.Opts {
		return prometheus.Opts{Name: metric, Help: help, ConstLabels: prometheus.Labels{"workflow": name}}
	}
	m := &metrics{
		name: name,
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts(opts("leasehold_workflow_transitions_total",
			"Workflow transitions by strategy and outcome (applied, repeated, already-done, wrong-state, not-allowed, exhausted, lock-timeout, error).")), []string{"strategy", "outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts(opts("leasehold_workflow_conflicts_total",
			"Conditional writes of workflow instances that found the instance changed."))),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts(opts("leasehold_workflow_strategy_switches_total",
			"Adaptive moves of an instance to fair queuing (to=queued) and back (to=optimistic).")), []string{"to"}),
		strategy: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("leasehold_workflow_instance_strategy",
			"1 for the strategy the adaptive strategy uses for an instance it saw lately (optimistic or queued).")), []string{"instance", "strategy"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts(opts("leasehold_workflow_instance_conflict_rate",
			"Conflict rate of an instance over the adaptive strategy's sliding window.")), []string{"instance"}),
	}
	for _, c := range []prometheus.Collector{m.transitions, m.conflicts, m.switches, m.strategy, m.rate} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(res Result, err error, configured Strategy) {
	if m == nil {
		return
	}
	outcome := string(res.Outcome)
	var exhausted *leasehold.RetriesExhaustedError
	switch {
	case err == nil:
	case errors.Is(err, ErrWrongState):
		outcome = "wrong-state"
	case errors.Is(err, ErrNotAllowed):
		outcome = "not-allowed"
	case errors.As(err, &exhausted):
		outcome = "exhausted"
	case errors.Is(err, leasehold.ErrLockTimeout):
		outcome = "lock-timeout"
	default:
		outcome = "error"
	}
	s := string(res.Strategy)
	if s == "" {
		s = string(configured) // an error before any strategy served it
	}
	m.transitions.WithLabelValues(s, outcome).Inc()
}

func (m *metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

func (m *metrics) switched(queued bool) {
	if m == nil {
		return
	}
	to := string(Optimistic)
	if queued {
		to = string(Queued)
	}
	m.switches.WithLabelValues(to).Inc()
}

func (m *metrics) mode(instance string, queued bool, rate float64) {
	if m == nil {
		return
	}
	on, off := string(Optimistic), string(Queued)
	if queued {
		on, off = off, on
	}
	m.strategy.WithLabelValues(instance, on).Set(1)
	m.strategy.WithLabelValues(instance, off).Set(0)
	m.rate.WithLabelValues(instance).Set(rate)
}

func (m *metrics) forget(instance string) {
	if m == nil {
		return
	}
	m.strategy.DeleteLabelValues(instance, string(Optimistic))
	m.strategy.DeleteLabelValues(instance, string(Queued))
	m.rate.DeleteLabelValues(instance)
}
