package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// HandlerOptions configure the HTTP API.
type HandlerOptions struct {
	// Auth checks httpBearer tokens; nil turns auth off (every request is
	// allowed everything).
	Auth *Auth
	// Limits rate-limits requests per identity; nil is unlimited.
	Limits *Limits
	// Logger gets one line per request at debug level, refused
	// credentials at warn and server errors at error. Nil discards.
	Logger *slog.Logger
	// Metrics, if set, counts requests and serves GET /metrics; it is
	// also given the Backend for its gauges.
	Metrics *Metrics
	// Dashboard, if set, is served under /dashboard/ (with the full
	// path), and / redirects there.
	Dashboard http.Handler
	// MaxBodyBytes caps request bodies (default 128 KiB). Larger bodies
	// get 413.
	MaxBodyBytes int64
	// Workflows serves POST /v1/workflows/{definition}/{instance}/transition
	// (http_workflows.go) for each definition, keyed by its name.
	Workflows map[string]*workflow.Workflows
	// AllowedHosts are the Host names served with auth off besides the
	// loopback ones (localhost, *.localhost, 127.0.0.0/8, [::1]) and the
	// IP address the request came in on; "*" allows any. Other Hosts get
	// 421 (a DNS-rebinding page names its own host). With auth on every
	// Host is served.
	AllowedHosts []string
	// BodyTimeout bounds reading a request body, from the end of its
	// headers to its last byte (default 10s); a slower body gets 400 or
	// its connection closed.
	BodyTimeout time.Duration
	// Holders, if set, gives every grant a secret (returned only in the
	// acquire response) and checks it on renew and release: a wrong
	// secret, or a missing one when Holders.Required, gets 403 bad-proof
	// and changes nothing. Nil turns holder proofs off.
	Holders *HolderProofs
}

// DefaultMaxBodyBytes is HandlerOptions.MaxBodyBytes's default: room for
// a lease's largest data (leasehold.MaxDataLen) in base64 and JSON.
const DefaultMaxBodyBytes = 128 << 10

// DefaultBodyTimeout is HandlerOptions.BodyTimeout's default.
const DefaultBodyTimeout = 10 * time.Second

// MaxWait is the longest wait_ms a request may ask for. Clients wait longer
// by repeating the request (remote.HTTPStore.AcquireWait does).
const MaxWait = 5 * time.Minute

// httpHeartbeat is the interval of the comments that keep an event stream's
// connection alive through proxies.
const httpHeartbeat = 15 * time.Second

// ProblemType is the prefix of the "type" member of every problem (RFC
// 9457) the API returns; the suffix names the problem (held, not-held, ...).
const ProblemType = "urn:leasehold:problem:"

// NewHandler returns the HTTP/JSON API (v1) over b. See docs/http-api.md.
func NewHandler(b Backend, opts HandlerOptions) http.Handler { return newHTTPAPI(b, opts) }

// httpAPI is the handler. Routing is done by hand on the escaped path, so that
// nothing (ServeMux's cleaning and redirects in particular) can rewrite a
// lease name between the request line and the authorisation check.
type httpAPI struct {
	b       Backend
	auth    *Auth
	limits  *Limits
	log     *slog.Logger
	metrics *Metrics
	dash    http.Handler
	maxBody int64

	bodyTimeout  time.Duration
	allowedHosts map[string]bool // lower case; "*" allows any

	workflows map[string]*workflow.Workflows
	holders   *HolderProofs

	// sessions binds each session opened here to its identity (auth on).
	sessions httpSessions
	// cop refuses state-changing cross-origin browser requests (CSRF): a
	// web page must not take or release leases on a server its visitor
	// can reach, such as one on loopback without auth.
	cop *http.CrossOriginProtection

	// drain ends long-polls and event streams when the server shuts down
	// (Server cancels it before http.Server.Shutdown waits for handlers).
	drain       context.Context
	cancelDrain context.CancelFunc
}

func newHTTPAPI(b Backend, opts HandlerOptions) *httpAPI {
	h := &httpAPI{
		b: b, auth: opts.Auth, limits: opts.Limits, log: opts.Logger,
		metrics: opts.Metrics, dash: opts.Dashboard, maxBody: opts.MaxBodyBytes,
		workflows: opts.Workflows, holders: opts.Holders,
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	h.bodyTimeout = opts.BodyTimeout
	if h.bodyTimeout <= 0 {
		h.bodyTimeout = DefaultBodyTimeout
	}
	h.allowedHosts = map[string]bool{}
	for _, a := range opts.AllowedHosts {
		h.allowedHosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
	}
	if h.metrics != nil {
		h.metrics.observe(b)
	}
	h.drain, h.cancelDrain = context.WithCancel(context.Background())
	h.cop = http.NewCrossOriginProtection()
	return h
}

// httpReq is one request being served.
type httpReq struct {
	w     *httpStatusWriter
	r     *http.Request
	id    *Identity
	route string // the route's template, for metrics and logs
	start time.Time
	err   error // the error behind a problem response, for the log
}

func (h *httpAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &httpStatusWriter{ResponseWriter: w}
	if r.TLS != nil {
		// Served over TLS: browsers must not fall back to plain HTTP.
		w.Header().Set("Strict-Transport-Security", "max-age=31536000")
	}
	h.bodyDeadline(w, r)
	q := &httpReq{w: sw, r: r, route: "unmatched", start: time.Now()}
	defer h.finish(q)
	if err := h.cop.Check(r); err != nil {
		q.err = err
		h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
			"cross-origin requests from browsers may not change leases (only the dashboard's own origin may)", nil)
		return
	}
	if !h.auth.Enabled() && httpUnsafe(r.Method) && httpFromBrowser(r) && !httpLocalHost(r.Host) && !h.hostListed(r.Host) {
		// Without auth, a page whose DNS name was re-pointed at this
		// server (DNS rebinding) looks same-origin to the browser: only
		// names that cannot be re-pointed may change leases.
		h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
			"with auth off, browsers may change leases only through localhost or an IP address (DNS rebinding protection); turn auth on to use a host name", nil)
		return
	}
	if !h.auth.Enabled() && !h.hostAllowed(r) {
		h.metrics.misdirectedHost()
		h.problem(q, http.StatusMisdirectedRequest, "misdirected-host", "Host not served",
			fmt.Sprintf("with auth off this server answers only to loopback names (localhost, 127.0.0.1, [::1]) and its own IP address, not to Host %q (DNS rebinding protection); allow the name with --allowed-hosts or turn auth on", r.Host), nil)
		return
	}
	h.route(q)
}

func httpUnsafe(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// httpFromBrowser reports whether a browser sent r (browsers send Origin
// or Sec-Fetch-Site with state-changing requests; other clients do not).
func httpFromBrowser(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != ""
}

// httpLocalHost reports whether a Host header is an IP address or
// localhost.
func httpLocalHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost")
}

// finish logs the request and counts it.
func (h *httpAPI) finish(q *httpReq) {
	code := q.w.status
	if code == 0 {
		code = http.StatusOK
	}
	if h.metrics != nil {
		h.metrics.request(q.route, code)
	}
	level := slog.LevelDebug
	switch {
	case code >= 500:
		level = slog.LevelError
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusTooManyRequests:
		level = slog.LevelWarn
	}
	if !h.log.Enabled(q.r.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", q.r.Method),
		slog.String("route", q.route),
		slog.String("path", q.r.URL.EscapedPath()),
		slog.Int("status", code),
		slog.Duration("duration", time.Since(q.start)),
		slog.String("remote", q.r.RemoteAddr),
	}
	if q.id != nil {
		attrs = append(attrs, slog.String("identity", q.id.Name))
	}
	if q.err != nil {
		attrs = append(attrs, slog.String("error", q.err.Error()))
	}
	h.log.LogAttrs(q.r.Context(), level, "http request", attrs...)
}

// route dispatches on the escaped path.
func (h *httpAPI) route(q *httpReq) {
	p := q.r.URL.EscapedPath()
	switch {
	case p == "/healthz":
		q.route = "/healthz"
		h.healthz(q)
	case p == "/readyz":
		q.route = "/readyz"
		h.readyz(q)
	case p == "/metrics":
		q.route = "/metrics"
		h.serveMetrics(q)
	case p == "/" && h.dash != nil:
		q.route = "/"
		http.Redirect(q.w, q.r, "/dashboard/", http.StatusFound)
	case p == "/dashboard" && h.dash != nil:
		q.route = "/dashboard/"
		http.Redirect(q.w, q.r, "/dashboard/", http.StatusMovedPermanently)
	case strings.HasPrefix(p, "/dashboard/") && h.dash != nil:
		q.route = "/dashboard/"
		h.dash.ServeHTTP(q.w, q.r)
	case p == "/v1/stats":
		q.route = "/v1/stats"
		h.stats(q)
	case p == "/v1/leases":
		q.route = "/v1/leases"
		h.list(q)
	case strings.HasPrefix(p, "/v1/leases/"):
		h.lease(q, strings.TrimPrefix(p, "/v1/leases/"))
	case p == "/v1/events":
		q.route = "/v1/events"
		h.events(q)
	case p == "/v1/events/recent":
		q.route = "/v1/events/recent"
		h.recent(q)
	case p == "/v1/sessions":
		q.route = "/v1/sessions"
		h.openSession(q)
	case strings.HasPrefix(p, "/v1/sessions/"):
		h.session(q, strings.TrimPrefix(p, "/v1/sessions/"))
	case strings.HasPrefix(p, "/v1/semaphores/"):
		h.semaphore(q, strings.TrimPrefix(p, "/v1/semaphores/"))
	case strings.HasPrefix(p, "/v1/elections/"):
		h.election(q, strings.TrimPrefix(p, "/v1/elections/"))
	case strings.HasPrefix(p, "/v1/records/"): // http_records.go
		h.record(q, strings.TrimPrefix(p, "/v1/records/"))
	case p == "/v1/txn":
		q.route = "/v1/txn"
		h.txn(q)
	case strings.HasPrefix(p, "/v1/workflows/"): // http_workflows.go
		h.workflowRoute(q, strings.TrimPrefix(p, "/v1/workflows/"))
	default:
		h.problem(q, http.StatusNotFound, "no-route", "No such endpoint", fmt.Sprintf("no such endpoint: %s", p), nil)
	}
}

// lease routes /v1/leases/{name} and /v1/leases/{name}/{action}. Names
// contain '/', so the action is the last segment of a POST's escaped path,
// and the name is the rest, percent-decoded exactly once.
func (h *httpAPI) lease(q *httpReq, rest string) {
	if q.r.Method == http.MethodGet || q.r.Method == http.MethodHead {
		q.route = "/v1/leases/{name}"
		name, ok := h.pathName(q, rest)
		if !ok {
			return
		}
		h.get(q, name)
		return
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		q.route = "/v1/leases/{name}"
		h.methodNotAllowed(q, "GET, HEAD")
		return
	}
	action, escaped := rest[i+1:], rest[:i]
	var do func(*httpReq, string)
	switch action {
	case "acquire":
		do = h.acquire
	case "renew":
		do = h.renew
	case "release":
		do = h.release
	case "force-release":
		do = h.forceRelease
	default:
		q.route = "/v1/leases/{name}"
		h.methodNotAllowed(q, "GET, HEAD")
		return
	}
	q.route = "/v1/leases/{name}/" + action
	if q.r.Method != http.MethodPost {
		h.methodNotAllowed(q, "POST")
		return
	}
	name, ok := h.pathName(q, escaped)
	if !ok {
		return
	}
	do(q, name)
}

// pathName authenticates the caller, then percent-decodes a name from the
// escaped path once and checks it. On failure it has answered.
func (h *httpAPI) pathName(q *httpReq, escaped string) (string, bool) {
	if !h.authenticate(q) {
		return "", false
	}
	name, err := url.PathUnescape(escaped)
	if err != nil {
		h.fail(q, &leasehold.InvalidError{Field: "name", Reason: "malformed percent-encoding in the path"})
		return "", false
	}
	if err := httpCheckName(name); err != nil {
		h.fail(q, err)
		return "", false
	}
	return name, true
}

// httpCheckName is CheckName, plus a check of every '%' (CheckName looks at
// the first only, so "a%zz%2F" would pass it).
func httpCheckName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return httpCheckEncoded(name)
}

func httpCheckPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return httpCheckName(prefix)
}

func httpCheckEncoded(s string) error {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && ishex(s[i+1]) && ishex(s[i+2]) {
			return &leasehold.InvalidError{Field: "name", Reason: "contains a percent-encoded sequence after decoding (double encoding is refused)"}
		}
	}
	return nil
}

// authenticate checks the httpBearer token and the identity's rate limit. A
// refused caller has been answered and nothing was done for it.
func (h *httpAPI) authenticate(q *httpReq) bool {
	token, hasToken := httpBearer(q.r)
	id, err := h.auth.Authenticate(token)
	if err != nil {
		// Unknown credentials share the anonymous budget, which slows
		// guessing without touching real identities' budgets.
		if !h.limits.Allow(nil) {
			h.rateLimited(q)
			return false
		}
		q.w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
		if hasToken {
			q.w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold", error="invalid_token"`)
		}
		h.problem(q, http.StatusUnauthorized, "unauthorized", "Unauthorized",
			"a valid httpBearer token is required (Authorization: Bearer TOKEN)", nil)
		return false
	}
	q.id = id
	if !h.limits.Allow(id) {
		h.rateLimited(q)
		return false
	}
	return true
}

func (h *httpAPI) rateLimited(q *httpReq) {
	if h.metrics != nil {
		h.metrics.rateLimited.Inc()
	}
	q.w.Header().Set("Retry-After", "1")
	h.problem(q, http.StatusTooManyRequests, "rate-limited", "Too many requests", "the rate limit of these credentials is exceeded; retry later", nil)
}

// httpBearer returns the token of an "Authorization: Bearer" header.
func httpBearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// allow checks that the caller has need on name; it answers 403 if not.
func (h *httpAPI) allow(q *httpReq, name string, need Access) bool {
	if q.id.Allowed(name, need) {
		return true
	}
	h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
		fmt.Sprintf("these credentials do not allow %s access to %q", need, name), nil)
	return false
}

// httpAnyGrant reports whether id has at least need on some prefix (sessions
// and stats have no name to check).
func httpAnyGrant(id *Identity, need Access) bool {
	if id == nil {
		return true
	}
	for _, g := range id.grants {
		if g.access >= need {
			return true
		}
	}
	return false
}

func (h *httpAPI) allowAny(q *httpReq, need Access, what string) bool {
	if httpAnyGrant(q.id, need) {
		return true
	}
	h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
		fmt.Sprintf("%s needs credentials with %s access to some prefix", what, need), nil)
	return false
}

// --- health, metrics, stats ---

func (h *httpAPI) healthz(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) {
		return
	}
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(http.StatusOK)
	io.WriteString(q.w, "ok\n")
}

func (h *httpAPI) readyz(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) {
		return
	}
	ctx, cancel := context.WithTimeout(q.r.Context(), 5*time.Second)
	defer cancel()
	if err := h.b.Ready(ctx); err != nil {
		q.err = err
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, "unavailable", "Not ready", "the backend is not ready", nil)
		return
	}
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(http.StatusOK)
	io.WriteString(q.w, "ready\n")
}

func (h *httpAPI) serveMetrics(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) || !h.authenticate(q) {
		return
	}
	if h.metrics == nil {
		h.problem(q, http.StatusNotFound, "not-found", "Not found", "metrics are not enabled on this server", nil)
		return
	}
	h.metrics.handler().ServeHTTP(q.w, q.r)
}

type httpStatsJSON struct {
	Held     int  `json:"held"`
	Waiters  int  `json:"waiters"`
	Sessions int  `json:"sessions"`
	Durable  bool `json:"durable"`
}

func (h *httpAPI) stats(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) || !h.authenticate(q) || !h.allowAny(q, AccessRead, "stats") {
		return
	}
	s := h.b.Stats()
	h.json(q, http.StatusOK, httpStatsJSON{Held: s.Held, Waiters: s.Waiters, Sessions: s.Sessions, Durable: s.Durable})
}

// --- leases ---

type httpAcquireBody struct {
	Owner      string  `json:"owner"`
	TTLMS      int64   `json:"ttl_ms"`
	Data       *string `json:"data"`
	DataBase64 *string `json:"data_base64"`
	RequestID  string  `json:"request_id"`
	WaitMS     int64   `json:"wait_ms"`
	Session    string  `json:"session"`
}

// request converts the body to a backend request for name.
func (a *httpAcquireBody) request(name string) (AcquireRequest, error) {
	var data []byte
	switch {
	case a.Data != nil && a.DataBase64 != nil:
		return AcquireRequest{}, &leasehold.InvalidError{Field: "data", Reason: "give data or data_base64, not both"}
	case a.Data != nil:
		data = []byte(*a.Data)
	case a.DataBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*a.DataBase64)
		if err != nil {
			return AcquireRequest{}, &leasehold.InvalidError{Field: "data_base64", Reason: "not valid standard base64: " + err.Error()}
		}
		data = b
	}
	wait, err := httpWait(a.WaitMS)
	if err != nil {
		return AcquireRequest{}, err
	}
	return AcquireRequest{
		AcquireRequest: leasehold.AcquireRequest{
			Name: name, Owner: a.Owner, RequestID: a.RequestID, TTL: httpMS(a.TTLMS), Data: data,
		},
		Session: a.Session,
		Wait:    wait,
	}, nil
}

func httpWait(ms int64) (time.Duration, error) {
	if ms < 0 || ms > MaxWait.Milliseconds() {
		return 0, &leasehold.InvalidError{Field: "wait_ms", Reason: fmt.Sprintf("%d must be in [0, %d] (wait longer by repeating the request)", ms, MaxWait.Milliseconds())}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// httpMS converts milliseconds, saturating so that an absurd value is
// refused by validation instead of overflowing into a valid one.
func httpMS(ms int64) time.Duration {
	const lim = int64(1<<63-1) / int64(time.Millisecond)
	switch {
	case ms > lim:
		return time.Duration(1<<63 - 1)
	case ms < -lim:
		return time.Duration(-1 << 63)
	}
	return time.Duration(ms) * time.Millisecond
}

func (h *httpAPI) acquire(q *httpReq, name string) {
	if !h.allow(q, name, AccessWrite) {
		return
	}
	var body httpAcquireBody
	if !h.decode(q, &body) {
		return
	}
	req, err := body.request(name)
	if err != nil {
		h.fail(q, err)
		return
	}
	ctx := q.r.Context()
	if req.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = h.drainable(ctx)
		defer cancel()
	}
	if !h.ownsSession(q, req.Session) {
		return
	}
	rec, err := h.b.Acquire(ctx, req)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
	lj.Session = req.Session
	lj.Secret = h.secret(rec)
	h.json(q, http.StatusOK, lj)
}

// secret is the holder proof of a grant, for the acquirer only ("" with
// proofs off).
func (h *httpAPI) secret(rec leasehold.Record) string {
	if h.holders == nil {
		return ""
	}
	return h.holders.Secret(rec.Name, rec.Owner, rec.Token)
}

// checkProof answers 403 bad-proof unless secret proves holding the grant
// (name, owner, token).
func (h *httpAPI) checkProof(q *httpReq, name, owner string, token uint64, secret string) bool {
	if err := h.holders.Check(name, owner, token, secret); err != nil {
		h.fail(q, err)
		return false
	}
	return true
}

// drainable derives a context that also ends when the server drains, for
// waits that may outlast a graceful shutdown's deadline.
func (h *httpAPI) drainable(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.drain, cancel)
	return ctx, func() { stop(); cancel() }
}

type httpRenewBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	TTLMS  int64  `json:"ttl_ms"`
	Secret string `json:"secret"`
}

type httpRenewJSON struct {
	Name  string `json:"name"`
	Token uint64 `json:"token"`
	TTLMS int64  `json:"ttl_ms"`
}

func (h *httpAPI) renew(q *httpReq, name string) {
	if !h.allow(q, name, AccessWrite) {
		return
	}
	var body httpRenewBody
	if !h.decode(q, &body) {
		return
	}
	if !h.checkProof(q, name, body.Owner, body.Token, body.Secret) {
		return
	}
	ttl := httpMS(body.TTLMS)
	if err := h.b.Renew(q.r.Context(), name, body.Owner, body.Token, ttl); err != nil {
		if errors.Is(err, leasehold.ErrNotHeld) && h.metrics != nil {
			h.metrics.lost.Inc()
		}
		h.fail(q, err)
		return
	}
	h.json(q, http.StatusOK, httpRenewJSON{Name: name, Token: body.Token, TTLMS: body.TTLMS})
}

type httpReleaseBody struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Secret string `json:"secret"`
}

func (h *httpAPI) release(q *httpReq, name string) {
	if !h.allow(q, name, AccessWrite) {
		return
	}
	var body httpReleaseBody
	if !h.decode(q, &body) {
		return
	}
	if !h.checkProof(q, name, body.Owner, body.Token, body.Secret) {
		return
	}
	if err := h.b.Release(q.r.Context(), name, body.Owner, body.Token); err != nil {
		h.fail(q, err)
		return
	}
	q.w.WriteHeader(http.StatusNoContent)
}

func (h *httpAPI) forceRelease(q *httpReq, name string) {
	if !h.allow(q, name, AccessAdmin) {
		return
	}
	var body struct{}
	if !h.decode(q, &body) {
		return
	}
	rec, err := h.b.ForceRelease(q.r.Context(), name)
	if err != nil {
		h.fail(q, err)
		return
	}
	h.json(q, http.StatusOK, httpLease(rec))
}

func (h *httpAPI) get(q *httpReq, name string) {
	if !h.allow(q, name, AccessRead) {
		return
	}
	rec, err := h.b.Get(q.r.Context(), name)
	if err != nil {
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
	ws := httpWaiters(h.b.Waiters(name))
	lj.Waiters = &ws
	h.json(q, http.StatusOK, lj)
}

type httpListJSON struct {
	Leases []httpLeaseJSON `json:"leases"`
}

func (h *httpAPI) list(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) || !h.authenticate(q) {
		return
	}
	prefix := q.r.URL.Query().Get("prefix")
	if err := httpCheckPrefix(prefix); err != nil {
		h.fail(q, err)
		return
	}
	if !q.id.ListAllowed(prefix) {
		h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
			fmt.Sprintf("these credentials do not allow listing under %q", prefix), nil)
		return
	}
	recs, err := h.b.List(q.r.Context(), prefix)
	if err != nil {
		h.fail(q, err)
		return
	}
	out := httpListJSON{Leases: make([]httpLeaseJSON, 0, len(recs))}
	for _, r := range recs {
		if q.id.Allowed(r.Name, AccessRead) {
			out.Leases = append(out.Leases, httpLease(r))
		}
	}
	h.json(q, http.StatusOK, out)
}

// --- JSON shapes ---

type httpLeaseJSON struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired"`
	// Data is the lease's data when it is valid UTF-8; otherwise it is in
	// DataBase64. Neither is set when the lease has no data.
	Data       *string `json:"data,omitempty"`
	DataBase64 string  `json:"data_base64,omitempty"`
	Session    string  `json:"session,omitempty"`
	Permit     *int    `json:"permit,omitempty"`
	Term       uint64  `json:"term,omitempty"`
	// Secret is the grant's holder proof: acquire responses only.
	Secret  string            `json:"secret,omitempty"`
	Waiters *[]httpWaiterJSON `json:"waiters,omitempty"` // GET only: always a list there
}

type httpWaiterJSON struct {
	Owner    string `json:"owner"`
	Session  string `json:"session,omitempty"`
	Since    string `json:"since"`
	WaitedMS int64  `json:"waited_ms"`
}

type httpHolderJSON struct {
	Owner       string `json:"owner"`
	Token       uint64 `json:"token"`
	RemainingMS int64  `json:"remaining_ms"`
	Acquired    string `json:"acquired,omitempty"`
}

func httpTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func httpLease(r leasehold.Record) httpLeaseJSON {
	lj := httpLeaseJSON{
		Name: r.Name, Owner: r.Owner, Token: r.Token,
		TTLMS:       httpCeilMS(r.TTL),
		RemainingMS: max(0, r.Remaining.Milliseconds()),
		Acquired:    httpTime(r.Acquired),
	}
	if len(r.Data) > 0 {
		if utf8.Valid(r.Data) {
			s := string(r.Data)
			lj.Data = &s
		} else {
			lj.DataBase64 = base64.StdEncoding.EncodeToString(r.Data)
		}
	}
	return lj
}

// httpCeilMS rounds a duration up to whole milliseconds (a TTL is never
// reported shorter than it is).
func httpCeilMS(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

func httpWaiters(ws []Waiter) []httpWaiterJSON {
	out := make([]httpWaiterJSON, 0, len(ws))
	for _, w := range ws {
		out = append(out, httpWaiterJSON{Owner: w.Owner, Session: w.Session, Since: httpTime(w.Since), WaitedMS: w.Waited.Milliseconds()})
	}
	return out
}

// --- events ---

type httpEventJSON struct {
	Type      EventType `json:"type"`
	Name      string    `json:"name,omitempty"`
	Owner     string    `json:"owner,omitempty"`
	Token     uint64    `json:"token,omitempty"`
	Time      string    `json:"time"`
	HandoffMS float64   `json:"handoff_ms,omitempty"`
	Waiters   int       `json:"waiters"`
}

func httpEvent(e Event) httpEventJSON {
	return httpEventJSON{
		Type: e.Type, Name: e.Name, Owner: e.Owner, Token: e.Token, Time: httpTime(e.Time),
		HandoffMS: float64(e.Handoff) / float64(time.Millisecond), Waiters: e.Waiters,
	}
}

// eventScope reads ?prefix= or ?name= and checks read access: events of
// names under prefix (or of exactly name) the caller may read.
func (h *httpAPI) eventScope(q *httpReq) (prefix string, exact bool, ok bool) {
	v := q.r.URL.Query()
	name, hasName := v.Get("name"), v.Has("name")
	prefix = v.Get("prefix")
	switch {
	case hasName && prefix != "":
		h.fail(q, &leasehold.InvalidError{Field: "name", Reason: "give name or prefix, not both"})
		return "", false, false
	case hasName:
		if err := httpCheckName(name); err != nil {
			h.fail(q, err)
			return "", false, false
		}
		return name, true, h.allow(q, name, AccessRead)
	}
	if err := httpCheckPrefix(prefix); err != nil {
		h.fail(q, err)
		return "", false, false
	}
	if !q.id.ListAllowed(prefix) {
		h.problem(q, http.StatusForbidden, "forbidden", "Forbidden",
			fmt.Sprintf("these credentials do not allow watching %q", prefix), nil)
		return "", false, false
	}
	return prefix, false, true
}

// httpVisible reports whether the caller gets event e of a stream.
func httpVisible(id *Identity, e Event, prefix string, exact bool) bool {
	if e.Type == EventOverflow {
		return true
	}
	if exact && e.Name != prefix {
		return false
	}
	return id.Allowed(e.Name, AccessRead)
}

func (h *httpAPI) events(q *httpReq) {
	if !h.methods(q, http.MethodGet) || !h.authenticate(q) {
		return
	}
	prefix, exact, ok := h.eventScope(q)
	if !ok {
		return
	}
	ctx, cancel := h.drainable(q.r.Context())
	defer cancel()
	ch := h.b.Subscribe(ctx, prefix)
	rc := http.NewResponseController(q.w)
	hdr := q.w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no")
	q.w.WriteHeader(http.StatusOK)
	// The subscription is registered: flushing now tells the client that
	// every later change will reach it.
	write := func(s []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := q.w.Write(s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write([]byte(": subscribed\n\n")) {
		return
	}
	tick := time.NewTicker(httpHeartbeat)
	defer tick.Stop()
	var buf bytes.Buffer
	for {
		select {
		case e, open := <-ch:
			if !open {
				return
			}
			if !httpVisible(q.id, e, prefix, exact) {
				continue
			}
			buf.Reset()
			b, _ := json.Marshal(httpEvent(e))
			fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", e.Type, b)
			if !write(buf.Bytes()) {
				return
			}
		case <-tick.C:
			if !write([]byte(": httpHeartbeat\n\n")) {
				return
			}
		}
	}
}

type httpEventsJSON struct {
	Events []httpEventJSON `json:"events"`
}

// httpMaxRecent caps ?n= of /v1/events/recent.
const httpMaxRecent = 10000

func (h *httpAPI) recent(q *httpReq) {
	if !h.methods(q, http.MethodGet, http.MethodHead) || !h.authenticate(q) {
		return
	}
	n := 100
	if s := q.r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > httpMaxRecent {
			h.fail(q, &leasehold.InvalidError{Field: "n", Reason: fmt.Sprintf("%q must be an integer in [1, %d]", s, httpMaxRecent)})
			return
		}
		n = v
	}
	prefix, exact, ok := h.eventScope(q)
	if !ok {
		return
	}
	out := httpEventsJSON{Events: []httpEventJSON{}}
	for _, e := range h.b.Recent(n) {
		if e.Type == EventOverflow || !strings.HasPrefix(e.Name, prefix) || !httpVisible(q.id, e, prefix, exact) {
			continue
		}
		out.Events = append(out.Events, httpEvent(e))
	}
	h.json(q, http.StatusOK, out)
}

// --- sessions ---

type httpSessionBody struct {
	TTLMS int64 `json:"ttl_ms"`
}

type httpSessionJSON struct {
	ID          string `json:"id"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
	Leases      int    `json:"leases"`
}

func httpSession(s Session) httpSessionJSON {
	return httpSessionJSON{ID: s.ID, TTLMS: httpCeilMS(s.TTL), RemainingMS: max(0, s.Remaining.Milliseconds()), Leases: s.Leases}
}

func (h *httpAPI) openSession(q *httpReq) {
	if !h.methods(q, http.MethodPost) || !h.authenticate(q) || !h.allowAny(q, AccessWrite, "sessions") {
		return
	}
	var body httpSessionBody
	if !h.decode(q, &body) {
		return
	}
	s, err := h.b.OpenSession(q.r.Context(), httpMS(body.TTLMS))
	if err != nil {
		h.fail(q, err)
		return
	}
	if h.auth.Enabled() {
		h.sessions.bind(q.id, s)
	}
	h.json(q, http.StatusCreated, httpSession(s))
}

// session routes /v1/sessions/{id} (DELETE) and /v1/sessions/{id}/keepalive.
func (h *httpAPI) session(q *httpReq, rest string) {
	escaped, action, _ := strings.Cut(rest, "/")
	switch {
	case action == "" && !strings.HasSuffix(rest, "/"):
		q.route = "/v1/sessions/{id}"
		if !h.methods(q, http.MethodDelete) {
			return
		}
	case action == "keepalive":
		q.route = "/v1/sessions/{id}/keepalive"
		if !h.methods(q, http.MethodPost) {
			return
		}
	default:
		h.problem(q, http.StatusNotFound, "no-route", "No such endpoint", "no such endpoint", nil)
		return
	}
	if !h.authenticate(q) || !h.allowAny(q, AccessWrite, "sessions") {
		return
	}
	id, err := url.PathUnescape(escaped)
	if err != nil || id == "" || !utf8.ValidString(id) || len(id) > 256 {
		h.fail(q, &leasehold.InvalidError{Field: "session", Reason: "malformed session id"})
		return
	}
	if action == "keepalive" {
		var body struct{}
		if !h.decode(q, &body) || !h.ownsSession(q, id) {
			return
		}
		s, err := h.b.KeepAlive(q.r.Context(), id)
		if err != nil {
			h.fail(q, err)
			return
		}
		if h.auth.Enabled() {
			h.sessions.bind(q.id, s)
		}
		h.json(q, http.StatusOK, httpSession(s))
		return
	}
	if !h.ownsSession(q, id) {
		return
	}
	if err := h.b.CloseSession(q.r.Context(), id); err != nil {
		h.fail(q, err)
		return
	}
	h.sessions.unbind(id)
	q.w.WriteHeader(http.StatusNoContent)
}

// ownsSession checks, with auth on, that the session was opened through
// this handler by the caller's identity; otherwise it answers no-session
// (as for an unknown session: ids are not confirmed to others). An empty
// id is no session and passes.
func (h *httpAPI) ownsSession(q *httpReq, sid string) bool {
	if sid == "" || !h.auth.Enabled() || h.sessions.owns(q.id, sid) {
		return true
	}
	h.fail(q, ErrNoSession)
	return false
}

// httpSessions remembers who opened each session, until well after it
// must have expired (twice its TTL and a minute after the last keepalive).
type httpSessions struct {
	mu sync.Mutex
	m  map[string]httpSessionOwner
}

type httpSessionOwner struct {
	identity string
	until    time.Time
}

func (b *httpSessions) bind(id *Identity, s Session) {
	if id == nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]httpSessionOwner{}
	}
	b.m[s.ID] = httpSessionOwner{identity: id.Name, until: now.Add(2*s.TTL + time.Minute)}
	if n := len(b.m); n >= 1024 && n&(n-1) == 0 { // sweep at powers of two
		for k, v := range b.m {
			if now.After(v.until) {
				delete(b.m, k)
			}
		}
	}
}

func (b *httpSessions) unbind(sid string) {
	b.mu.Lock()
	delete(b.m, sid)
	b.mu.Unlock()
}

func (b *httpSessions) owns(id *Identity, sid string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.m[sid]
	return ok && id != nil && o.identity == id.Name && time.Now().Before(o.until)
}

// --- elections ---

// election serves GET /v1/elections/{name}/leader: the lease of the
// election's name (its token is the term). Campaigning is an acquire of
// the name with wait_ms.
func (h *httpAPI) election(q *httpReq, rest string) {
	escaped, ok := strings.CutSuffix(rest, "/leader")
	q.route = "/v1/elections/{name}/leader"
	if !ok {
		q.route = "unmatched"
		h.problem(q, http.StatusNotFound, "no-route", "No such endpoint", "no such endpoint (GET /v1/elections/{name}/leader)", nil)
		return
	}
	if !h.methods(q, http.MethodGet, http.MethodHead) {
		return
	}
	name, ok := h.pathName(q, escaped)
	if !ok || !h.allow(q, name, AccessRead) {
		return
	}
	rec, err := h.b.Get(q.r.Context(), name)
	if err != nil {
		if errors.Is(err, leasehold.ErrNotFound) {
			h.problem(q, http.StatusNotFound, "not-found", "No leader", fmt.Sprintf("election %q has no leader", name), nil)
			return
		}
		h.fail(q, err)
		return
	}
	lj := httpLease(rec)
	lj.Term = rec.Token
	h.json(q, http.StatusOK, lj)
}

// --- plumbing ---

// methods answers 405 unless the request's method is one of ms.
func (h *httpAPI) methods(q *httpReq, ms ...string) bool {
	for _, m := range ms {
		if q.r.Method == m {
			return true
		}
	}
	h.methodNotAllowed(q, strings.Join(ms, ", "))
	return false
}

func (h *httpAPI) methodNotAllowed(q *httpReq, allow string) {
	q.w.Header().Set("Allow", allow)
	h.problem(q, http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
		fmt.Sprintf("%s is not allowed here (allowed: %s)", q.r.Method, allow), nil)
}

// decode reads a JSON request body into v: at most maxBody bytes, no
// unknown fields, one value. An empty body decodes as {}. A content type
// other than JSON gets 415; a missing one is accepted, and so is curl's
// default for -d (application/x-www-form-urlencoded), whose body must
// still be JSON. (Cross-site form posts from browsers are refused before
// this, by ServeHTTP's cross-origin checks.)
func (h *httpAPI) decode(q *httpReq, v any) bool {
	if ct := q.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-www-form-urlencoded") {
			h.problem(q, http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type",
				fmt.Sprintf("request bodies are JSON (Content-Type: application/json), not %q", ct), nil)
			return false
		}
	}
	// The body's read deadline (BodyTimeout) was set when the request
	// came in (bodyDeadline).
	body, err := io.ReadAll(http.MaxBytesReader(q.w, q.r.Body, h.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.problem(q, http.StatusRequestEntityTooLarge, "too-large", "Request body too large",
				fmt.Sprintf("request bodies are limited to %d bytes", h.maxBody), nil)
			return false
		}
		h.fail(q, &leasehold.InvalidError{Field: "body", Reason: "reading the request body: " + err.Error()})
		return false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		h.fail(q, httpJSONError(err))
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		h.fail(q, &leasehold.InvalidError{Field: "body", Reason: "more than one JSON value"})
		return false
	}
	return true
}

// httpJSONError turns a decoding error into an *InvalidError naming the field.
func httpJSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "body"
		}
		return &leasehold.InvalidError{Field: field, Reason: fmt.Sprintf("want a JSON %s, got %s", te.Type, te.Value)}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return &leasehold.InvalidError{Field: strings.Trim(f, `"`), Reason: "unknown field"}
	}
	return &leasehold.InvalidError{Field: "body", Reason: "malformed JSON: " + strings.TrimPrefix(msg, "json: ")}
}

func (h *httpAPI) json(q *httpReq, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		h.fail(q, err)
		return
	}
	q.w.Header().Set("Content-Type", "application/json")
	q.w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	q.w.WriteHeader(status)
	if q.r.Method != http.MethodHead {
		q.w.Write(buf.Bytes())
	}
}

// fail answers with the problem that err stands for.
func (h *httpAPI) fail(q *httpReq, err error) {
	q.err = err
	var held *leasehold.HeldError
	var inv *leasehold.InvalidError
	switch {
	case errors.As(err, &held):
		h.problem(q, http.StatusConflict, "held", "Lease held",
			held.Error(), map[string]any{"holder": httpHolder(held)})
	case errors.Is(err, leasehold.ErrNotHeld):
		h.problem(q, http.StatusConflict, "not-held", "Lease not held",
			"the lease is not held by that owner and token (never granted, released, expired or taken over); nothing was changed", nil)
	case errors.Is(err, leasehold.ErrNotFound):
		h.problem(q, http.StatusNotFound, "not-found", "Not found", "no live lease with that name", nil)
	case errors.As(err, &inv):
		h.problem(q, http.StatusBadRequest, "invalid", "Invalid request", inv.Error(),
			map[string]any{"field": inv.Field, "reason": inv.Reason})
	case errors.Is(err, ErrBadProof):
		h.problem(q, http.StatusForbidden, "bad-proof", "Bad holder proof",
			"renewing or releasing a lease needs the secret returned with its grant (\"secret\" in the acquire response); it is missing or does not match; nothing was changed", nil)
	case errors.Is(err, ErrNoSession):
		h.problem(q, http.StatusNotFound, "no-session", "No such session", ErrNoSession.Error(), nil)
	case errors.Is(err, leasehold.ErrClosed):
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, "unavailable", "Unavailable", "the server is shutting down", nil)
	case errors.Is(err, context.Canceled) && h.drain.Err() != nil && q.r.Context().Err() == nil:
		q.w.Header().Set("Retry-After", "1")
		h.problem(q, http.StatusServiceUnavailable, "unavailable", "Unavailable", "the server is shutting down; the wait was ended", nil)
	case errors.Is(err, context.Canceled) && q.r.Context().Err() != nil:
		// The client went away; nobody reads this answer.
		h.problem(q, 499, "timeout", "Client closed request", "the request was cancelled by the client", nil)
	case errors.Is(err, context.DeadlineExceeded):
		h.problem(q, http.StatusGatewayTimeout, "timeout", "Timeout", "the backend did not answer in time; the outcome is unknown", nil)
	default:
		h.problem(q, http.StatusInternalServerError, "internal", "Internal error", "internal error; see the server's log", nil)
	}
}

func httpHolder(he *leasehold.HeldError) httpHolderJSON {
	return httpHolderJSON{Owner: he.Owner, Token: he.Token, RemainingMS: max(0, he.Remaining.Milliseconds()), Acquired: httpTime(he.Acquired)}
}

// problem writes an RFC 9457 problem document.
func (h *httpAPI) problem(q *httpReq, status int, typ, title, detail string, extra map[string]any) {
	// type, title, status and detail first, then the extras (sorted).
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{ProblemType + typ, title, status, detail})
	if len(extra) > 0 {
		ex, _ := json.Marshal(extra)
		b = append(append(b[:len(b)-1], ','), ex[1:]...)
	}
	b = append(b, '\n')
	q.w.Header().Set("Content-Type", "application/problem+json")
	q.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	q.w.Header().Set("Cache-Control", "no-store")
	q.w.WriteHeader(status)
	if q.r.Method != http.MethodHead {
		q.w.Write(b)
	}
}

// httpStatusWriter records the status code; Unwrap lets
// http.ResponseController reach the connection (flush, deadlines).
type httpStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *httpStatusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *httpStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *httpStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *httpStatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
