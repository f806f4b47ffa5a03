package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// EnvAuthToken is the environment variable OpenHTTP reads the bearer token
// from when the URL has none. (Not LEASEHOLD_TOKEN: "leasehold run" passes
// the fencing token to its child in that variable.)
const EnvAuthToken = "LEASEHOLD_AUTH_TOKEN"

// DefaultTimeout bounds each request that does not wait (everything but
// AcquireWait's long-polls and Watch's event streams) unless the URL sets
// ?timeout=.
const DefaultTimeout = 30 * time.Second

// longPoll is the wait_ms of each of AcquireWait's requests; it repeats
// them while its context lives.
const longPoll = 30 * time.Second

// Errors of the server that have no equivalent in package leasehold. A
// *ProblemError matches one of them with errors.Is.
var (
	ErrUnauthorized = errors.New("leasehold server: missing or unknown credentials")
	ErrForbidden    = errors.New("leasehold server: the credentials do not allow this")
	ErrRateLimited  = errors.New("leasehold server: rate limit exceeded")
	// ErrQuotaExceeded: the client (identity, or address with auth off)
	// is at one of the server's quotas (leases, data, sessions, waiters);
	// nothing was changed. Retrying does not help until it holds less.
	ErrQuotaExceeded = errors.New("leasehold server: quota exceeded")
	ErrUnavailable   = errors.New("leasehold server: unavailable")
	// ErrNoSession reports an unknown, closed or expired session.
	ErrNoSession = errors.New("leasehold server: no such session (unknown, closed or expired)")
)

// ProblemError is a problem document (RFC 9457) the server answered with
// that has no leasehold error of its own.
type ProblemError struct {
	Status int    // HTTP status
	Type   string // the problem's type without the urn:leasehold:problem: prefix ("forbidden", ...)
	Title  string
	Detail string
	// RetryAfter is the server's Retry-After, if it sent one.
	RetryAfter time.Duration
}

func (e *ProblemError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = e.Title
	}
	return fmt.Sprintf("leasehold server: %d %s: %s", e.Status, e.Type, msg)
}

// Is matches the package's sentinel errors by problem type.
func (e *ProblemError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Type == httpwire.Unauthorized
	case ErrForbidden:
		return e.Type == httpwire.Forbidden
	case ErrRateLimited:
		return e.Type == httpwire.RateLimited
	case ErrQuotaExceeded:
		return e.Type == httpwire.QuotaExceeded
	case ErrUnavailable:
		return e.Type == httpwire.Unavailable
	case ErrNoSession:
		return e.Type == httpwire.NoSession
	case ErrBadProof, leasehold.ErrNotHeld:
		return e.Type == httpwire.BadProof
	}
	return false
}

var (
	_ leasehold.Store   = (*HTTPStore)(nil)
	_ leasehold.Watcher = (*HTTPStore)(nil)
	_ leasehold.Queuer  = (*HTTPStore)(nil)
)

// HTTPStore is a leasehold.Store (and Watcher and Queuer) backed by a
// leasehold server's HTTP API. It is safe for concurrent use and keeps its
// connections open for reuse.
type HTTPStore struct {
	*conn
	// session, when set, attaches every acquire to that session, sess.
	session string
	sess    *Session
	// borrowed stores (Session.Store) do not close the connection pool.
	borrowed bool
}

// conn is what the stores of one OpenHTTP share.
type conn struct {
	base    string // scheme://host[:port][/path], without a trailing slash
	token   string
	client  *http.Client
	timeout time.Duration

	ctx    context.Context // ends at Close: ends watches and sessions
	cancel context.CancelFunc
	closed atomic.Bool

	// secrets are the holder proofs of the grants acquired here (by any
	// store of this connection: sessions' stores too).
	secrets *holderSecrets
}

// OpenHTTP opens a store on the server at rawURL:
//
//	http://host:port                    plain HTTP
//	https://host:port                   TLS, checked against the system's roots
//	https://host:port/prefix            the API under a reverse proxy's path prefix
//
// Query parameters:
//
//	token=T        bearer token (default: $LEASEHOLD_AUTH_TOKEN)
//	ca=FILE        PEM file of the CAs to trust instead of the system's
//	cert=FILE      client certificate (PEM), with key=FILE, for mutual TLS
//	key=FILE
//	server_name=N  the name to check the server's certificate against
//	timeout=D      per-request timeout of requests that do not wait (default 30s)
//
// Opening does not contact the server.
func OpenHTTP(rawURL string) (*HTTPStore, error) {
	bad := func(format string, args ...any) error {
		return &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(format, args...)}
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, bad("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, bad("no host (want http://host:port)")
	}
	if u.User != nil {
		return nil, bad("credentials in the URL's user part are not used; pass ?token= or $%s", EnvAuthToken)
	}
	if u.Fragment != "" {
		return nil, bad("no fragment allowed")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, bad("query: %v", err)
	}
	get := func(k string) string {
		v := q.Get(k)
		q.Del(k)
		return v
	}
	token, ca, cert, key, serverName, timeoutS := get("token"), get("ca"), get("cert"), get("key"), get("server_name"), get("timeout")
	for k := range q {
		return nil, bad("unknown parameter %q (known: token, ca, cert, key, server_name, timeout)", k)
	}
	if token == "" {
		token = os.Getenv(EnvAuthToken)
	}
	timeout := DefaultTimeout
	if timeoutS != "" {
		if timeout, err = time.ParseDuration(timeoutS); err != nil || timeout <= 0 {
			return nil, bad("timeout=%q: want a positive duration such as 10s", timeoutS)
		}
	}
	var tc *tls.Config
	if ca != "" || cert != "" || key != "" || serverName != "" {
		if u.Scheme != "https" {
			return nil, bad("ca, cert, key and server_name need an https URL")
		}
		if tc, err = clientTLS(serverName, ca, cert, key); err != nil {
			return nil, bad("%v", err)
		}
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       tc,
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		base:    u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		token:   token,
		client:  &http.Client{Transport: tr, CheckRedirect: noRedirects},
		timeout: timeout,
		ctx:     ctx,
		cancel:  cancel,
		secrets: newHolderSecrets(),
	}
	return &HTTPStore{conn: c}, nil
}

// noRedirects: a redirect of an API call means a misconfigured URL; never
// follow it (it could also carry the token elsewhere).
func noRedirects(req *http.Request, via []*http.Request) error { return http.ErrUseLastResponse }

// Close ends the store's watches and sessions' keepalives and closes its
// idle connections. It does not release leases; the sessions opened on it
// end (Err matches leasehold.ErrLost), and so the leases taken through them
// are lost at once (the server frees them when the sessions expire). Later
// calls return leasehold.ErrClosed. Closing a Session's store does nothing.
func (s *HTTPStore) Close() error {
	if s.borrowed {
		return nil
	}
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	s.client.CloseIdleConnections()
	return nil
}

// --- paths (the bodies and answers are wire/httpwire's) ---

// namePath is /v1/{kind}/NAME[/action] with each segment of NAME
// percent-encoded: the server decodes the name once.
func (c *conn) namePath(kind, name string, action string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	p := "/v1/" + kind + "/" + strings.Join(segs, "/")
	if action != "" {
		p += "/" + action
	}
	return p
}

// answerRecord is the grant an answer describes.
func answerRecord(l *httpwire.Lease) (leasehold.Record, error) {
	r, err := l.Record()
	if err != nil {
		return r, fmt.Errorf("leasehold server: malformed lease in the answer: %v", err)
	}
	return r, nil
}

// --- requests ---

type call struct {
	method, path string
	query        url.Values
	body         any
	// replayable lets the transport resend the request on a connection
	// that turned out dead before any answer: set for operations that are
	// safe to repeat (renew, release, an acquire with a request id).
	replayable bool
	// wait is how long the server may hold the request (long-polls); the
	// request's timeout is that plus the default timeout.
	wait time.Duration
	// name is the lease (or record key) the call is about, for errors.
	name string
	// header is set on the request; raw, when set (or for a PUT), is the
	// body as is (a record's value), instead of body's JSON.
	header map[string]string
	raw    []byte
	// records maps problems to record errors too (recordError).
	records bool
}

// do sends c and decodes a 2xx answer's JSON into out (if non-nil). Any
// other answer becomes an error.
func (s *HTTPStore) do(ctx context.Context, c call, out any) (int, error) {
	if s.closed.Load() {
		return 0, leasehold.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout+c.wait)
	defer cancel()
	u := s.base + c.path
	if len(c.query) > 0 {
		u += "?" + c.query.Encode()
	}
	var body io.Reader
	ctype := ""
	switch {
	case c.body != nil:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.body); err != nil {
			return 0, err
		}
		body, ctype = &buf, "application/json"
	case c.raw != nil || c.method == http.MethodPut:
		body, ctype = bytes.NewReader(c.raw), "application/octet-stream"
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, body)
	if err != nil {
		return 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if c.replayable {
		req.Header.Set("Idempotency-Key", randid.Hex(12))
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, s.transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, s.transportError(ctx, err)
	}
	if resp.StatusCode/100 != 2 {
		if c.records {
			return resp.StatusCode, recordError(resp, data, c.name)
		}
		return resp.StatusCode, problemError(resp, data, c.name)
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("leasehold server: malformed answer to %s %s: %v", c.method, c.path, err)
		}
	}
	return resp.StatusCode, nil
}

// transportError keeps a context's error recognisable and says whether
// the request may have reached the server: not if the connection was never
// made (refused, no route, unknown host: nothing was sent), else the
// outcome is unknown.
func (s *HTTPStore) transportError(ctx context.Context, err error) error {
	if s.closed.Load() {
		return leasehold.ErrClosed
	}
	var oe *net.OpError
	dial := errors.As(err, &oe) && oe.Op == "dial"
	if cerr := ctx.Err(); cerr != nil {
		if dial {
			return fmt.Errorf("leasehold server: %w while connecting (nothing was sent)", cerr)
		}
		return fmt.Errorf("leasehold server: %w (the outcome is unknown)", cerr)
	}
	if dial {
		return fmt.Errorf("leasehold server not reached (nothing was sent): %w", err)
	}
	return fmt.Errorf("leasehold server unreachable (the outcome is unknown): %w", err)
}

// problemError maps a problem answer back to leasehold's errors.
func problemError(resp *http.Response, data []byte, name string) error {
	p, ok := httpwire.DecodeProblem(resp.Header.Get("Content-Type"), data)
	if !ok {
		snippet := strings.TrimSpace(string(data))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "..."
		}
		return fmt.Errorf("leasehold server: unexpected answer %s (not a leasehold problem document): %s", resp.Status, snippet)
	}
	typ := p.Name()
	switch typ {
	case httpwire.Held:
		return p.HeldError(name)
	case httpwire.NotHeld:
		return leasehold.ErrNotHeld
	case httpwire.NotFound:
		return leasehold.ErrNotFound
	case httpwire.Invalid:
		return p.InvalidError()
	}
	pe := &ProblemError{Status: resp.StatusCode, Type: typ, Title: p.Title, Detail: p.Detail}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
			pe.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return pe
}

// --- leasehold.Store ---

// TryAcquire implements leasehold.Store: one attempt, no waiting.
func (s *HTTPStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	return s.acquire(ctx, req, 0)
}

func (s *HTTPStore) acquire(ctx context.Context, req leasehold.AcquireRequest, wait time.Duration) (leasehold.Record, error) {
	var lj httpwire.Lease
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", req.Name, "acquire"),
		body: httpwire.AcquireBodyOf(req, wait, s.session), replayable: req.RequestID != "", wait: wait, name: req.Name,
	}, &lj)
	if err != nil {
		return leasehold.Record{}, err
	}
	rec, err := answerRecord(&lj)
	if err != nil {
		return leasehold.Record{}, err
	}
	s.secrets.put(rec, lj.Secret, s.session)
	if s.sess != nil && s.sess.Err() != nil {
		s.secrets.dropSession(s.session) // ended meanwhile: its grants are freed
	}
	return rec, nil
}

// AcquireWait implements leasehold.Queuer: it waits in the server's FIFO
// queue for the lease, with long-polls of 30s repeated while ctx lives,
// and returns the grant, or ctx's error when ctx ends. Without a request
// id it makes one, so that its repeated requests never wait behind their
// own grant. Errors other than "held" (a transient failure, invalid
// input, refused credentials) are returned at once.
//
// When ctx ends during a long-poll, the server drops the waiter; if the
// grant raced with the end, AcquireWait releases it (best effort; else it
// expires after its TTL).
func (s *HTTPStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if req.RequestID == "" {
		req.RequestID = randid.Hex(12)
	}
	var bo *backoff.Backoff
	for {
		wait := longPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl))
		}
		if err := ctx.Err(); err != nil {
			return leasehold.Record{}, err
		}
		wait = max(wait, time.Millisecond)
		rec, err := s.acquire(ctx, req, wait)
		if err == nil {
			return rec, nil
		}
		if ctx.Err() != nil {
			// In the background: a hung server does not stretch the
			// caller's time.
			go reclaimGrant(s.ctx, s, req, func(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
				return s.acquire(ctx, req, 0)
			})
			return leasehold.Record{}, ctx.Err()
		}
		if errors.Is(err, leasehold.ErrHeld) {
			continue // the long-poll ran out: wait again
		}
		var pe *ProblemError
		if errors.As(err, &pe) && pe.Type == httpwire.Unavailable {
			// The server is shutting down or not ready: wait a little
			// (a quarter of its Retry-After, and a backoff from 50ms
			// that spreads the waiters) and ask again (another
			// instance, or the restarted one).
			if bo == nil {
				bo = backoff.New(100*time.Millisecond, 2*time.Second)
			}
			if err := backoff.Sleep(ctx, pe.RetryAfter/4+bo.Next()); err != nil {
				return leasehold.Record{}, err
			}
			continue
		}
		return leasehold.Record{}, err
	}
}

// Renew implements leasehold.Store. It sends the grant's secret if this
// store acquired the grant (and the server gave one); a server with holder
// proofs refuses a renew without the right one with an error matching
// ErrBadProof and leasehold.ErrNotHeld.
func (s *HTTPStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := storekit.ValidateTTL(ttl); err != nil {
		return err
	}
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", name, "renew"),
		body:       httpwire.RenewBody{Owner: owner, Token: token, TTLMS: httpwire.CeilMS(ttl), Secret: s.secrets.get(name, owner, token)},
		replayable: true, name: name,
	}, nil)
	s.secrets.settle(name, owner, token, ttl, err)
	return err
}

// Release implements leasehold.Store. Like Renew, it sends the grant's
// secret if this store has it.
func (s *HTTPStore) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", name, "release"),
		body:       httpwire.ReleaseBody{Owner: owner, Token: token, Secret: s.secrets.get(name, owner, token)},
		replayable: true, name: name,
	}, nil)
	s.secrets.settle(name, owner, token, 0, err)
	return err
}

// HolderSecret returns the secret (holder proof) of a grant acquired
// through this store's connection and not ended since, or "" if it has
// none (the server gives none, or the grant was acquired elsewhere). A
// process that hands a grant to another (to release it early, say) hands
// over the secret too: the other's store takes it with SetHolderSecret.
// Treat it as a credential.
func (s *HTTPStore) HolderSecret(name, owner string, token uint64) string {
	return s.secrets.get(name, owner, token)
}

// SetHolderSecret gives the store the secret of a grant acquired
// elsewhere, so that its Renew and Release of the grant send it. It is
// kept until the grant is released or found not held, or a minute after
// the last renewal through this store's connection (or after this call).
func (s *HTTPStore) SetHolderSecret(name, owner string, token uint64, secret string) {
	s.secrets.importSecret(name, owner, token, secret)
}

// ForceRelease frees a lease whoever holds it (it needs admin access) and
// returns the grant it ended, or leasehold.ErrNotFound.
func (s *HTTPStore) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	var lj httpwire.Lease
	if _, err := s.do(ctx, call{method: http.MethodPost, path: s.namePath("leases", name, "force-release"), body: struct{}{}, name: name}, &lj); err != nil {
		return leasehold.Record{}, err
	}
	return answerRecord(&lj)
}

// Get implements leasehold.Store.
func (s *HTTPStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	var lj httpwire.Lease
	if _, err := s.do(ctx, call{method: http.MethodGet, path: s.namePath("leases", name, ""), name: name}, &lj); err != nil {
		return leasehold.Record{}, err
	}
	return answerRecord(&lj)
}

// List implements leasehold.Store. With auth on, it lists only the leases
// the token may read. The server answers in pages (of up to 10,000
// leases); List asks for the next one, after the last name of the page
// before, until there are no more. A lease held throughout is listed once;
// one granted or freed meanwhile may or may not be.
func (s *HTTPStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var recs []leasehold.Record
	after := ""
	for {
		var out httpwire.List
		q := url.Values{}
		if prefix != "" {
			q.Set("prefix", prefix)
		}
		if after != "" {
			q.Set("after", after)
		}
		if _, err := s.do(ctx, call{method: http.MethodGet, path: "/v1/leases", query: q}, &out); err != nil {
			return nil, err
		}
		if recs == nil {
			recs = make([]leasehold.Record, 0, len(out.Leases))
		}
		for i := range out.Leases {
			r, err := answerRecord(&out.Leases[i])
			if err != nil {
				return nil, err
			}
			recs = append(recs, r)
		}
		if out.Next == "" {
			return recs, nil
		}
		if out.Next <= after {
			return nil, fmt.Errorf("leasehold server: malformed answer to GET /v1/leases: next %q does not follow %q", out.Next, after)
		}
		after = out.Next
	}
}

// Ready asks the server whether it can serve (GET /readyz).
func (s *HTTPStore) Ready(ctx context.Context) error {
	_, err := s.do(ctx, call{method: http.MethodGet, path: "/readyz"}, nil)
	return err
}

// --- leasehold.Watcher ---

// Watch implements leasehold.Watcher with the server's event stream for
// the name (GET /v1/events?name=). It returns once the server has
// subscribed, so every later release is signalled. When the stream breaks
// it reconnects, and signals once (a release may have been missed).
func (s *HTTPStore) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	body, err := s.openEvents(wctx, name)
	if err != nil {
		stop()
		cancel()
		if s.closed.Load() {
			return nil, leasehold.ErrClosed
		}
		return nil, err
	}
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		defer stop()
		defer cancel()
		bo := backoff.New(50*time.Millisecond, 5*time.Second)
		for {
			readEvents(body, notify)
			body.Close()
			if wctx.Err() != nil {
				return
			}
			notify()
			for {
				if backoff.Sleep(wctx, bo.Next()) != nil {
					return
				}
				if body, err = s.openEvents(wctx, name); err == nil {
					bo.Reset()
					notify()
					break
				}
			}
		}
	}()
	return out, nil
}

// openEvents opens the event stream of name and returns its body once the
// server answered (it answers after subscribing).
func (s *HTTPStore) openEvents(ctx context.Context, name string) (io.ReadCloser, error) {
	if s.closed.Load() {
		return nil, leasehold.ErrClosed
	}
	u := s.base + "/v1/events?" + url.Values{"name": {name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	// The answer's headers must come within the usual timeout; the stream
	// then lasts until ctx ends.
	rctx, rcancel := context.WithCancel(ctx)
	req = req.WithContext(rctx)
	timer := time.AfterFunc(s.timeout, rcancel)
	resp, err := s.client.Do(req)
	if !timer.Stop() && err == nil {
		resp.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		rcancel()
		return nil, s.transportError(ctx, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer rcancel()
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, problemError(resp, data, name)
	}
	return &streamBody{resp.Body, rcancel}, nil
}

// streamBody ends its request's context when closed.
type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readEvents reads a server-sent event stream until it ends, calling
// notify for each event that says the lease may have become free.
func readEvents(r io.Reader, notify func()) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event:"); ok && httpwire.MayFree(strings.TrimSpace(ev)) {
			notify()
		}
	}
}

// --- sessions ---

// Session is a server session: leases acquired through its Store live as
// long as it does, kept alive by one keepalive for all of them, and are
// released by the server when it ends.
//
// It is also a leasehold.Bound, and its Store a leasehold.BoundedStore: a
// Lease taken through Store is lost no later than the session. The
// session's local deadline is t0 + TTL·(1−ρ) − ε, where t0 is taken (on the
// monotonic and the boot-time clock) before the last confirmed keepalive
// (or the open) was sent; the server frees the session's leases no earlier
// than TTL after it received that keepalive.
type Session struct {
	*keeper
	s *HTTPStore

	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

var (
	_ leasehold.Bound        = (*Session)(nil)
	_ leasehold.BoundedStore = (*HTTPStore)(nil)
)

// OpenSession opens a session with the given TTL and keeps it alive in the
// background (every TTL/3) until Close. If the server refuses a keepalive
// (the session expired, or the server forgot it) or none is confirmed
// before the session's local deadline (see Session), the session is lost:
// Done closes, Err returns an error matching leasehold.ErrLost, and every
// Lease taken through its Store is lost at that moment; the server
// releases (or has released) those leases. A bad TTL or option is an
// *leasehold.InvalidError and opens nothing.
func (s *HTTPStore) OpenSession(ctx context.Context, ttl time.Duration, opts ...SessionOption) (*Session, error) {
	cfg, err := sessionOptions(ttl, opts)
	if err != nil {
		return nil, err
	}
	t0, b0 := cfg.clock.Now(), cfg.clock.Boot()
	var sj httpwire.Session
	if _, err := s.do(ctx, call{method: http.MethodPost, path: "/v1/sessions", body: httpwire.SessionBody{TTLMS: httpwire.CeilMS(ttl)}}, &sj); err != nil {
		return nil, err
	}
	kctx, stop := context.WithCancel(s.ctx)
	x := &Session{keeper: newKeeper(sj.ID, ttl, cfg, t0, b0), s: s, stop: stop}
	x.onEnd = func() { s.secrets.dropSession(sj.ID) }
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		x.run(kctx, t0, func(ctx context.Context) error {
			_, err := x.s.do(ctx, call{method: http.MethodPost, path: "/v1/sessions/" + url.PathEscape(x.id) + "/keepalive", replayable: true}, nil)
			return err
		}, func(err error) bool { return errors.Is(err, ErrNoSession) })
		if !x.closed.Load() {
			// The store was closed: nothing keeps the session alive now.
			x.end(fmt.Errorf("session %s: %w: its store was closed", x.id, leasehold.ErrLost))
		}
	}()
	return x, nil
}

// ID is the session's id. Treat it as a secret: it lets its bearer close
// the session.
func (x *Session) ID() string { return x.id }

// TTL is the session's time to live.
func (x *Session) TTL() time.Duration { return x.ttl }

// Store returns a store whose acquires attach to the session (the
// server then keeps those leases alive with the session, and releases them
// when it ends). Leases taken through it are bounded by the session
// (leasehold.BoundedStore). Its Close does nothing; close the session
// instead.
func (x *Session) Store() *HTTPStore {
	return &HTTPStore{conn: x.s.conn, session: x.id, sess: x, borrowed: true}
}

// LeaseBound implements leasehold.BoundedStore: a grant made through a
// Session's Store is bounded by that session; other grants return nil.
func (s *HTTPStore) LeaseBound(leasehold.Record) leasehold.Bound {
	if s.sess == nil {
		return nil
	}
	return s.sess
}

// Close ends the session on the server, which releases its leases, and
// stops the keepalive. Leases taken through it are lost (their Err matches
// leasehold.ErrLost); Err then matches leasehold.ErrReleased. Closing
// twice, or a lost session, returns nil.
func (x *Session) Close(ctx context.Context) error {
	if x.closed.Swap(true) {
		return nil
	}
	x.stop()
	x.wg.Wait()
	lost := !x.end(fmt.Errorf("session %s closed: %w", x.id, leasehold.ErrReleased))
	_, err := x.s.do(ctx, call{method: http.MethodDelete, path: "/v1/sessions/" + url.PathEscape(x.id), replayable: true}, nil)
	if errors.Is(err, ErrNoSession) && lost {
		return nil
	}
	return err
}
