package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
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
	// WriteTimeout bounds sending a response, from its first byte to its
	// last (default 30s): a client that does not read a large answer (a
	// list of 13 MB) is disconnected and the answer dropped, instead of
	// holding it in memory. A long-poll's wait is not counted; event
	// streams are not bounded.
	WriteTimeout time.Duration
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

// DefaultWriteTimeout is HandlerOptions.WriteTimeout's default.
const DefaultWriteTimeout = 30 * time.Second

// MaxWait is the longest wait_ms a request may ask for. Clients wait longer
// by repeating the request (remote.HTTPStore.AcquireWait does).
const MaxWait = 5 * time.Minute

// httpHeartbeat is the interval of the comments that keep an event stream's
// connection alive through proxies.
const httpHeartbeat = 15 * time.Second

// ProblemType is the prefix of the "type" member of every problem (RFC
// 9457) the API returns; the suffix names the problem (held, not-held, ...).
const ProblemType = httpwire.ProblemType

// NewHandler returns the HTTP/JSON API (v1) over b. See docs/http-api.md.
func NewHandler(b Backend, opts HandlerOptions) http.Handler { return newHTTPAPI(b, opts) }

// httpAPI is the handler. Routing is done on the escaped path, by the
// route table (http_table.go), so that nothing (ServeMux's cleaning and
// redirects in particular) can rewrite a lease name between the request
// line and the authorisation check.
type httpAPI struct {
	b       Backend
	started time.Time // when the API was made: /v1/stats's started
	auth    *Auth
	limits  *Limits
	log     *slog.Logger
	metrics *Metrics
	dash    http.Handler
	maxBody int64

	bodyTimeout  time.Duration
	writeTimeout time.Duration
	allowedHosts map[string]bool // lower case; "*" allows any

	workflows map[string]*workflow.Workflows
	holders   *HolderProofs

	// sessions binds each session opened here to its identity (auth on).
	sessions httpSessions

	// authFail limits wrong bearer tokens per client IP as RESP's AUTH
	// is (a good token is always accepted); refusals logs refused
	// requests (401, 403, 429) at most once a second.
	authFail authLimiter
	refusals rateLog
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
		workflows: opts.Workflows, holders: opts.Holders, started: time.Now(),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.refusals.log, h.refusals.interval = h.log, time.Second
	orDefault(&h.maxBody, DefaultMaxBodyBytes)
	h.bodyTimeout = opts.BodyTimeout
	orDefault(&h.bodyTimeout, DefaultBodyTimeout)
	h.writeTimeout = opts.WriteTimeout
	orDefault(&h.writeTimeout, DefaultWriteTimeout)
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
	op    string // the route's operation, for logs
	start time.Time
	err   error // the error behind a problem response, for the log
}

func (h *httpAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &httpStatusWriter{ResponseWriter: w}
	if r.TLS != nil {
		// Served over TLS: browsers must not fall back to plain HTTP.
		w.Header().Set("Strict-Transport-Security", "max-age=31536000")
	}
	// A write deadline set for the previous response on this keep-alive
	// connection (respond) must not cut this one.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
	h.bodyDeadline(w, r)
	q := &httpReq{w: sw, r: r, route: "unmatched", start: time.Now()}
	q.r = r.WithContext(withQuotaClient(r.Context(), q))
	defer h.finish(q)
	if err := h.cop.Check(r); err != nil {
		q.err = err
		h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
			"cross-origin requests from browsers may not change leases (only the dashboard's own origin may)", nil)
		return
	}
	if !h.auth.Enabled() && httpUnsafe(r.Method) && httpFromBrowser(r) && !httpLocalHost(r.Host) && !h.hostListed(r.Host) {
		// Without auth, a page whose DNS name was re-pointed at this
		// server (DNS rebinding) looks same-origin to the browser: only
		// names that cannot be re-pointed may change leases.
		h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
			"with auth off, browsers may change leases only through localhost or an IP address (DNS rebinding protection); turn auth on to use a host name", nil)
		return
	}
	if !h.auth.Enabled() && !h.hostAllowed(r) {
		h.metrics.misdirectedHost()
		h.problem(q, http.StatusMisdirectedRequest, httpwire.MisdirectedHost, "Host not served",
			fmt.Sprintf("with auth off this server answers only to loopback names (localhost, 127.0.0.1, [::1]) and its own IP address, not to Host %q (DNS rebinding protection); allow the name with --allowed-hosts or turn auth on", r.Host), nil)
		return
	}
	h.route(q)
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
		slog.String("path", cutPath(q.r.URL.EscapedPath())),
		slog.Int("status", code),
		slog.Duration("duration", time.Since(q.start)),
		slog.String("remote", q.r.RemoteAddr),
	}
	if q.op != "" {
		attrs = append(attrs, slog.String("op", q.op))
	}
	if q.id != nil {
		attrs = append(attrs, slog.String("identity", q.id.Name))
	}
	if q.err != nil {
		attrs = append(attrs, slog.String("error", q.err.Error()))
	}
	if level == slog.LevelWarn {
		// Refusals come as fast as anyone can send them: at most a line
		// a second (with the count of those skipped).
		args := make([]any, len(attrs))
		for i, a := range attrs {
			args[i] = a
		}
		h.refusals.Warn("http request refused", args...)
		return
	}
	h.log.LogAttrs(q.r.Context(), level, "http request", attrs...)
}

// route finds the request's row in the route table and serves it.
func (h *httpAPI) route(q *httpReq) {
	p := q.r.URL.EscapedPath()
	var allow []string
	for _, row := range httpRoutes {
		if row.dash && h.dash == nil {
			continue
		}
		raw, ok := row.match(p)
		if !ok {
			continue
		}
		if row.allows(q.r.Method) {
			h.serveRoute(q, row, raw)
			return
		}
		if allow == nil {
			q.route = row.pattern
		}
		for _, m := range row.methods {
			if !slices.Contains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	if allow != nil {
		h.methodNotAllowed(q, strings.Join(allow, ", "))
		return
	}
	h.problem(q, http.StatusNotFound, httpwire.NoRoute, "No such endpoint", fmt.Sprintf("no such endpoint: %s", p), nil)
}

// serveRoute is the preamble of every row: authentication and the rate
// limit, the path's and the query's names, the permission and the body's
// size limit; then the row's handler, with the checked arguments.
func (h *httpAPI) serveRoute(q *httpReq, row *httpRoute, raw map[string]string) {
	q.route, q.op = row.pattern, row.op
	a := &httpArgs{}
	if row.scope == httpPublic {
		row.handle(h, q, a)
		return
	}
	if !h.authenticate(q) {
		return
	}
	if !h.pathArgs(q, row, raw, a) {
		return
	}
	switch row.scope {
	case httpOnPrefix, httpOnEvents:
		if !h.queryArgs(q, row, a) {
			return
		}
	}
	if !h.permitted(q, row, a) {
		return
	}
	if q.r.Body != nil && q.r.Body != http.NoBody {
		limit, what := h.maxBody, "request bodies"
		if row.value {
			limit, what = min(h.maxBody, leasehold.MaxValueLen), "record values"
		}
		if q.r.ContentLength > limit {
			h.problem(q, http.StatusRequestEntityTooLarge, httpwire.TooLarge, "Request body too large",
				fmt.Sprintf("%s are limited to %d bytes", what, limit), nil)
			return
		}
		q.r.Body = http.MaxBytesReader(q.w, q.r.Body, limit)
	}
	row.handle(h, q, a)
}

// pathArgs decodes the path parameters once and checks them: {name} and
// {key} as names (httpCheckName), {id} as a session id, {definition} and
// {instance} as names of one segment, in the pattern's order. On failure
// it has answered.
func (h *httpAPI) pathArgs(q *httpReq, row *httpRoute, raw map[string]string, a *httpArgs) bool {
	for _, seg := range row.segs {
		p, ok := httpParamName(seg)
		if !ok {
			continue
		}
		escaped := raw[p]
		field := p
		switch p {
		case "id":
			field = "session"
		case "request_id":
			field = "request id"
		}
		v, err := url.PathUnescape(escaped)
		if err != nil {
			h.fail(q, &leasehold.InvalidError{Field: field, Reason: "malformed percent-encoding in the path"})
			return false
		}
		switch p {
		case "name":
			if row.existing {
				err = httpCheckExisting(v)
			} else {
				err = httpCheckName(v)
			}
		case "key":
			if row.existing {
				err = asKey(httpCheckExisting(v))
			} else {
				err = httpCheckKey(v)
			}
		case "id":
			if v == "" || !utf8.ValidString(v) || len(v) > 256 {
				err = &leasehold.InvalidError{Field: "session", Reason: "malformed session id"}
			}
		case "definition", "instance":
			err = httpCheckName(v)
			var inv *leasehold.InvalidError
			switch {
			case errors.As(err, &inv):
				err = &leasehold.InvalidError{Field: field, Reason: inv.Reason}
			case err == nil && strings.Contains(v, "/"):
				err = &leasehold.InvalidError{Field: field, Reason: "contains '/'"}
			}
		}
		if err != nil {
			h.fail(q, err)
			return false
		}
		if p == "name" || p == "key" {
			a.name = v
			continue
		}
		if a.params == nil {
			a.params = map[string]string{}
		}
		a.params[p] = v
	}
	return true
}

// queryArgs reads and checks ?prefix= (and, for events, ?name=, exclusive
// with it). On failure it has answered.
func (h *httpAPI) queryArgs(q *httpReq, row *httpRoute, a *httpArgs) bool {
	checkName, checkPrefix := httpCheckName, httpCheckPrefix
	if row.existing {
		checkName, checkPrefix = httpCheckExisting, httpCheckExistingPrefix
	}
	scope := row.scope
	v := q.r.URL.Query()
	a.prefix = v.Get("prefix")
	if scope == httpOnEvents && v.Has("name") {
		if a.prefix != "" {
			h.fail(q, &leasehold.InvalidError{Field: "name", Reason: "give name or prefix, not both"})
			return false
		}
		a.name, a.prefix, a.exact = v.Get("name"), "", true
		if err := checkName(a.name); err != nil {
			h.fail(q, err)
			return false
		}
		return true
	}
	if err := checkPrefix(a.prefix); err != nil {
		h.fail(q, err)
		return false
	}
	return true
}

// permitted checks the row's access on its scope; it answers 403 if the
// caller lacks it. With auth off (q.id nil) everything is permitted.
func (h *httpAPI) permitted(q *httpReq, row *httpRoute, a *httpArgs) bool {
	switch row.scope {
	case httpOnName:
		name := a.name
		if row.on != nil {
			name = row.on(h, a)
		}
		return h.allow(q, name, row.access)
	case httpOnEvents:
		if a.exact {
			return h.allow(q, a.name, row.access)
		}
		fallthrough
	case httpOnPrefix:
		if q.id.Allowed(a.prefix, row.access) {
			return true
		}
		h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
			fmt.Sprintf("these credentials do not allow %s access to the prefix %q (%s)", row.access, a.prefix, row.op), nil)
		return false
	case httpOnAny, httpOnBody:
		if httpAnyGrant(q.id, row.access) {
			return true
		}
		h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
			fmt.Sprintf("%s needs credentials with %s access to some prefix", row.op, row.access), nil)
		return false
	case httpOnAll:
		if q.id.Allowed("", row.access) {
			return true
		}
		h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
			fmt.Sprintf("%s shows the activity of every prefix: it needs %s access to the whole name space (a grant on the prefix \"\")", row.op, row.access), nil)
		return false
	}
	return true
}

// httpCheckName is CheckName, plus a check of every '%' (CheckName looks at
// the first only, so "a%zz%2F" would pass it).
func httpCheckName(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return httpCheckEncoded(name)
}

// httpCheckExisting is httpCheckName for names that may already exist
// (CheckExistingName: no visible-character rule).
func httpCheckExisting(name string) error {
	if err := CheckExistingName(name); err != nil {
		return err
	}
	return httpCheckEncoded(name)
}

func httpCheckExistingPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return httpCheckExisting(prefix)
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

// authenticate checks the bearer token and the identity's rate limit. A
// refused caller has been answered and nothing was done for it.
func (h *httpAPI) authenticate(q *httpReq) bool {
	token, hasToken := httpBearer(q.r)
	id, err := h.auth.Authenticate(token)
	if err != nil && hasToken {
		// A wrong token: an address over its failures (as RESP's AUTH)
		// is answered 429 after authTarpit, so that guessing over HTTP
		// is no faster than over RESP; a good token is never refused for
		// others' failures.
		addr := httpClientIP(q.r)
		if !h.authFail.allow(addr) {
			time.Sleep(authTarpit)
			h.rateLimited(q)
			return false
		}
		h.authFail.failed(addr)
	}
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
		h.problem(q, http.StatusUnauthorized, httpwire.Unauthorized, "Unauthorized",
			"a valid bearer token is required (Authorization: Bearer TOKEN)", nil)
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
	h.problem(q, http.StatusTooManyRequests, httpwire.RateLimited, "Too many requests", "the rate limit of these credentials is exceeded; retry later", nil)
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
// The preamble calls it for a row's name; handlers call it for names they
// find in a body.
func (h *httpAPI) allow(q *httpReq, name string, need Access) bool {
	if q.id.Allowed(name, need) {
		return true
	}
	h.problem(q, http.StatusForbidden, httpwire.Forbidden, "Forbidden",
		fmt.Sprintf("these credentials do not allow %s access to %q", need, name), nil)
	return false
}

// httpAnyGrant reports whether id has at least need on some prefix (sessions
// have no name to check).
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

// drainable derives a context that also ends when the server drains, for
// waits that may outlast a graceful shutdown's deadline.
func (h *httpAPI) drainable(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(h.drain, cancel)
	return ctx, func() { stop(); cancel() }
}

func (h *httpAPI) methodNotAllowed(q *httpReq, allow string) {
	q.w.Header().Set("Allow", allow)
	h.problem(q, http.StatusMethodNotAllowed, httpwire.MethodNotAllowed, "Method not allowed",
		fmt.Sprintf("%s is not allowed here (allowed: %s)", q.r.Method, allow), nil)
}

// cutPath shortens a path for a log line to 256 bytes.
func cutPath(p string) string {
	if len(p) <= 256 {
		return p
	}
	return p[:256] + "…"
}

// httpClientIP is the request's client IP (the connection's peer).
func httpClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// quotaKey is the client this request counts against: its identity, or
// with auth off its address. The backend reads it after authenticate.
func (q *httpReq) quotaKey() string { return quotaKeyFor(q.id, httpClientIP(q.r)) }
