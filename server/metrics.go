package server

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the server's Prometheus metrics. Create them with NewMetrics,
// pass Hooks() to the Backend (EngineConfig.Hooks, for example) and the
// Metrics to the HTTP handler, which serves GET /metrics and adds the
// Backend's gauges.
//
//	leasehold_grants_total            grants (new and retried)
//	leasehold_releases_total          releases by the holder
//	leasehold_force_releases_total    releases by an admin
//	leasehold_expiries_total          leases that ran out (TTL or session)
//	leasehold_renewals_total          successful renewals
//	leasehold_waits_total             acquires queued behind a holder
//	leasehold_lost_total              renewals refused over HTTP (the holder lost its lease)
//	leasehold_handoff_seconds         release or expiry to the next waiter's grant
//	leasehold_sync_seconds            group-commit fsync latency
//	leasehold_sync_records            records made durable per group commit
//	leasehold_held_leases             live leases (gauge)
//	leasehold_waiters                 queued acquires (gauge)
//	leasehold_sessions                open sessions (gauge)
//	leasehold_durable                 1 if acknowledged grants survive a crash
//	leasehold_http_requests_total     HTTP requests by route template and status code
//	leasehold_rate_limited_total      requests refused by the rate limit (also AUTHs over the failed-AUTH limit)
//	leasehold_resp_connections        open RESP connections (gauge)
//	leasehold_resp_connections_closed_total  RESP connections refused or closed by a bound, by reason
//	leasehold_http_body_timeouts_total HTTP request bodies cut by the body-read deadline
//	leasehold_http_connections_refused_total  HTTP connections refused by a cap, by reason
//	leasehold_http_misdirected_total  HTTP requests refused for their Host (auth off)
//	leasehold_quota_refusals_total    requests refused at a client's quota, by resource
type Metrics struct {
	grants, releases, forced, expiries, renewals, waits prometheus.Counter
	lost, rateLimited                                   prometheus.Counter
	quotaRefusals                                       *prometheus.CounterVec
	handoff, syncSeconds, syncRecords                   prometheus.Histogram
	requests                                            *prometheus.CounterVec

	respConns                   prometheus.Gauge
	respClosedBy, httpRefusedBy *prometheus.CounterVec
	bodyTimeouts, misdirected   prometheus.Counter

	backend atomic.Pointer[Backend]
	gather  prometheus.Gatherer
}

// NewMetrics creates the metrics and registers them with reg. A nil reg
// means a new registry of their own (with the Go runtime and process
// collectors). If reg is also a prometheus.Gatherer (a *prometheus.Registry
// is), GET /metrics serves it; otherwise it serves the default gatherer.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
		reg = r
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &Metrics{
		grants:      counter("leasehold_grants_total", "Leases granted."),
		releases:    counter("leasehold_releases_total", "Leases released by their holder."),
		forced:      counter("leasehold_force_releases_total", "Leases released by an admin."),
		expiries:    counter("leasehold_expiries_total", "Leases that expired (TTL or session end)."),
		renewals:    counter("leasehold_renewals_total", "Successful renewals."),
		waits:       counter("leasehold_waits_total", "Acquires queued behind a holder."),
		lost:        counter("leasehold_lost_total", "Renewals refused because the lease was no longer held (the holder lost it)."),
		rateLimited: counter("leasehold_rate_limited_total", "Requests refused by the per-identity rate limit."),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_handoff_seconds",
			Help:    "Time from a release or expiry to the grant to the next queued waiter.",
			Buckets: handoffBuckets(),
		}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_sync_seconds",
			Help:    "Duration of each group commit (write and fsync of the log).",
			Buckets: prometheus.ExponentialBucketsRange(20e-6, 2, 20),
		}),
		syncRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_sync_records",
			Help:    "Records made durable by each group commit.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_http_requests_total",
			Help: "HTTP requests by route template and status code.",
		}, []string{"route", "code"}),
		respConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_resp_connections", Help: "Open RESP connections.",
		}),
		respClosedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_resp_connections_closed_total",
			Help: "RESP connections refused or closed by a resource bound or a guard, by reason " +
				"(max_conns, max_conns_per_addr, auth_timeout, tls_handshake, input_limit, total_input, output_limit, total_output, http_request, foreign_protocol, command_timeout, protocol_error, evicted).",
		}, []string{"reason"}),
		httpRefusedBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_http_connections_refused_total",
			Help: "HTTP connections refused by a connection cap, by reason (max_conns, max_conns_per_addr).",
		}, []string{"reason"}),
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_quota_refusals_total",
			Help: "Requests refused because their client was at a quota (--quota-*), by resource (leases, data, sessions, waiters, subscriptions).",
		}, []string{"resource"}),
		bodyTimeouts: counter("leasehold_http_body_timeouts_total", "HTTP request bodies cut by the body-read deadline."),
		misdirected:  counter("leasehold_http_misdirected_total", "HTTP requests refused (421) because, with auth off, their Host is not an allowed one."),
	}
	for _, r := range []string{closeMaxConns, closeMaxPerAddr, closeAuthTimeout, closeHandshake, closeInputLimit, closeTotalInput, closeOutputLimit, closeTotalOutput, closeHTTP, closeForeign, closeCommandTimeout, closeProtocolErr, closeEvicted} {
		m.respClosedBy.WithLabelValues(r)
	}
	for _, r := range []string{QuotaLeases, QuotaData, QuotaSessions, QuotaWaiters, QuotaSubscriptions} {
		m.quotaRefusals.WithLabelValues(r)
	}
	m.httpRefusedBy.WithLabelValues(closeMaxConns)
	m.httpRefusedBy.WithLabelValues(closeMaxPerAddr)
	reg.MustRegister(m.grants, m.releases, m.forced, m.expiries, m.renewals, m.waits, m.lost, m.rateLimited,
		m.handoff, m.syncSeconds, m.syncRecords, m.requests, statsCollector{m},
		m.respConns, m.respClosedBy, m.httpRefusedBy, m.bodyTimeouts, m.misdirected, m.quotaRefusals)
	if g, ok := reg.(prometheus.Gatherer); ok {
		m.gather = g
	} else {
		m.gather = prometheus.DefaultGatherer
	}
	return m
}

// handoffBuckets are fine buckets from 50µs to 10s: 1, 2 and 5 per decade.
func handoffBuckets() []float64 {
	var b []float64
	for d := 1e-5; d < 10; d *= 10 {
		for _, k := range []float64{1, 2, 5} {
			if v := d * k; v >= 50e-6 && v <= 10 {
				b = append(b, v)
			}
		}
	}
	return append(b, 10)
}

// Hooks returns the hooks that feed the metrics from a Backend's events
// and group commits.
func (m *Metrics) Hooks() Hooks {
	return Hooks{
		Event: m.event,
		Sync: func(d time.Duration, records int) {
			m.syncSeconds.Observe(d.Seconds())
			m.syncRecords.Observe(float64(records))
		},
	}
}

func (m *Metrics) event(e Event) {
	switch e.Type {
	case EventGranted:
		m.grants.Inc()
		if e.Handoff > 0 {
			m.handoff.Observe(e.Handoff.Seconds())
		}
	case EventReleased:
		m.releases.Inc()
	case EventForced:
		m.forced.Inc()
	case EventExpired:
		m.expiries.Inc()
	case EventRenewed:
		m.renewals.Inc()
	case EventQueued:
		m.waits.Inc()
	}
}

// observe makes b the source of the gauges.
func (m *Metrics) observe(b Backend) { m.backend.Store(&b) }

func (m *Metrics) request(route string, code int) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
}

// The hardening metrics; each is a no-op on a nil *Metrics.

func (m *Metrics) respConnOpened() {
	if m != nil {
		m.respConns.Inc()
	}
}

func (m *Metrics) respConnClosed() {
	if m != nil {
		m.respConns.Dec()
	}
}

func (m *Metrics) respClosed(reason string) {
	if m != nil {
		m.respClosedBy.WithLabelValues(reason).Inc()
	}
}

// rateLimit counts a request refused by a rate limit (here: an AUTH over
// the failed-AUTH limit).
func (m *Metrics) rateLimit() {
	if m != nil {
		m.rateLimited.Inc()
	}
}

func (m *Metrics) quotaRefused(resource string) {
	if m != nil {
		m.quotaRefusals.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) httpRefused(reason string) {
	if m != nil {
		m.httpRefusedBy.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) bodyTimeout() {
	if m != nil {
		m.bodyTimeouts.Inc()
	}
}

func (m *Metrics) misdirectedHost() {
	if m != nil {
		m.misdirected.Inc()
	}
}

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.gather, promhttp.HandlerOpts{})
}

// statsCollector reads Backend.Stats at each scrape.
type statsCollector struct{ m *Metrics }

var (
	descHeld     = prometheus.NewDesc("leasehold_held_leases", "Live leases.", nil, nil)
	descWaiters  = prometheus.NewDesc("leasehold_waiters", "Queued acquires, all names.", nil, nil)
	descSessions = prometheus.NewDesc("leasehold_sessions", "Open sessions.", nil, nil)
	descDurable  = prometheus.NewDesc("leasehold_durable", "1 if acknowledged grants survive a crash.", nil, nil)
)

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHeld
	ch <- descWaiters
	ch <- descSessions
	ch <- descDurable
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	bp := c.m.backend.Load()
	if bp == nil {
		return
	}
	s := (*bp).Stats()
	durable := 0.0
	if s.Durable {
		durable = 1
	}
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(s.Held))
	ch <- prometheus.MustNewConstMetric(descWaiters, prometheus.GaugeValue, float64(s.Waiters))
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(s.Sessions))
	ch <- prometheus.MustNewConstMetric(descDurable, prometheus.GaugeValue, durable)
}
