package server

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/wire/httpwire"
)

// Health, readiness, metrics, stats and the dashboard's files.

func (h *httpAPI) healthz(q *httpReq, _ *httpArgs) {
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(http.StatusOK)
	io.WriteString(q.w, "ok\n")
}

func (h *httpAPI) readyz(q *httpReq, _ *httpArgs) {
	ctx, cancel := context.WithTimeout(q.r.Context(), 5*time.Second)
	defer cancel()
	if err := h.b.Ready(ctx); err != nil {
		q.err = err
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, httpwire.Unavailable, "Not ready", "the backend is not ready", nil)
		return
	}
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(http.StatusOK)
	io.WriteString(q.w, "ready\n")
}

// dashRedirect sends / and /dashboard to /dashboard/.
func (h *httpAPI) dashRedirect(q *httpReq, _ *httpArgs) {
	code := http.StatusMovedPermanently
	if q.r.URL.EscapedPath() == "/" {
		code = http.StatusFound
	}
	http.Redirect(q.w, q.r, "/dashboard/", code)
}

func (h *httpAPI) dashboard(q *httpReq, _ *httpArgs) { h.dash.ServeHTTP(q.w, q.r) }

func (h *httpAPI) serveMetrics(q *httpReq, _ *httpArgs) {
	if h.metrics == nil {
		h.problem(q, http.StatusNotFound, httpwire.NotFound, "Not found", "metrics are not enabled on this server", nil)
		return
	}
	h.metrics.handler().ServeHTTP(q.w, q.r)
}

func (h *httpAPI) stats(q *httpReq, _ *httpArgs) {
	s := h.b.Stats()
	h.json(q, http.StatusOK, httpwire.Stats{Held: s.Held, Waiters: s.Waiters, Sessions: s.Sessions, Durable: s.Durable, Started: httpwire.Time(h.started)})
}
