package remote

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold"
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
	ErrUnavailable  = errors.New("leasehold server: unavailable")
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
		return e.Type == "unauthorized"
	case ErrForbidden:
		return e.Type == "forbidden"
	case ErrRateLimited:
		return e.Type == "rate-limited"
	case ErrUnavailable:
		return e.Type == "unavailable"
	case ErrNoSession:
		return e.Type == "no-session"
	case ErrBadProof, leasehold.ErrNotHeld:
		return e.Type == "bad-proof"
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
		tc = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, bad("ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, bad("ca %s: no PEM certificates in it", ca)
			}
			tc.RootCAs = pool
		}
		if (cert == "") != (key == "") {
			return nil, bad("cert and key go together")
		}
		if cert != "" {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, bad("client certificate: %v", err)
			}
			tc.Certificates = []tls.Certificate{c}
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

// --- paths and bodies ---

// leasePath is /v1/{kind}/NAME with each segment of NAME percent-encoded:
// the server decodes the name once.
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

type leaseJSON struct {
	Name        string  `json:"name"`
	Owner       string  `json:"owner"`
	Token       uint64  `json:"token"`
	TTLMS       int64   `json:"ttl_ms"`
	RemainingMS int64   `json:"remaining_ms"`
	Acquired    string  `json:"acquired"`
	Data        *string `json:"data"`
	DataBase64  string  `json:"data_base64"`
	Session     string  `json:"session"`
	Permit      *int    `json:"permit"`
	Term        uint64  `json:"term"`
	// Secret is the grant's holder proof: in acquire answers only.
	Secret string `json:"secret"`
}

func (l *leaseJSON) record() (leasehold.Record, error) {
	r := leasehold.Record{
		Name: l.Name, Owner: l.Owner, Token: l.Token,
		TTL:       time.Duration(l.TTLMS) * time.Millisecond,
		Remaining: time.Duration(l.RemainingMS) * time.Millisecond,
	}
	if l.Acquired != "" {
		t, err := time.Parse(time.RFC3339Nano, l.Acquired)
		if err != nil {
			return r, fmt.Errorf("leasehold server: bad acquired time %q", l.Acquired)
		}
		r.Acquired = t
	}
	switch {
	case l.Data != nil:
		r.Data = []byte(*l.Data)
	case l.DataBase64 != "":
		b, err := base64.StdEncoding.DecodeString(l.DataBase64)
		if err != nil {
			return r, fmt.Errorf("leasehold server: bad data_base64: %v", err)
		}
		r.Data = b
	}
	return r, nil
}

type acquireJSON struct {
	Owner      string  `json:"owner"`
	TTLMS      int64   `json:"ttl_ms"`
	Data       *string `json:"data,omitempty"`
	DataBase64 string  `json:"data_base64,omitempty"`
	RequestID  string  `json:"request_id,omitempty"`
	WaitMS     int64   `json:"wait_ms,omitempty"`
	Session    string  `json:"session,omitempty"`
}

// ceilMS rounds up: the server never holds a lease for less time than the
// holder computes its deadline from.
func ceilMS(d time.Duration) int64 {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return int64(ms)
}

func (s *HTTPStore) acquireBody(req leasehold.AcquireRequest, wait time.Duration) acquireJSON {
	b := acquireJSON{Owner: req.Owner, TTLMS: ceilMS(req.TTL), RequestID: req.RequestID, WaitMS: ceilMS(wait), Session: s.session}
	if len(req.Data) > 0 {
		if plainText(req.Data) {
			d := string(req.Data)
			b.Data = &d
		} else {
			b.DataBase64 = base64.StdEncoding.EncodeToString(req.Data)
		}
	}
	return b
}

// plainText reports whether data travels well as a JSON string: valid
// UTF-8 without control characters (which JSON escapes to 6 bytes each).
func plainText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
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
	// name is the lease the call is about, for *HeldError.
	name string
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
	if c.body != nil {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.body); err != nil {
			return 0, err
		}
		body = &buf
	}
	req, err := http.NewRequestWithContext(ctx, c.method, u, body)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	if c.replayable {
		req.Header.Set("Idempotency-Key", randomID(12))
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

type problemJSON struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
	Reason string `json:"reason"`
	Holder *struct {
		Owner       string `json:"owner"`
		Token       uint64 `json:"token"`
		RemainingMS int64  `json:"remaining_ms"`
		Acquired    string `json:"acquired"`
	} `json:"holder"`
}

const problemPrefix = "urn:leasehold:problem:"

// problemError maps a problem answer back to leasehold's errors.
func problemError(resp *http.Response, data []byte, name string) error {
	var p problemJSON
	ct := resp.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "application/problem+json") || json.Unmarshal(data, &p) != nil || !strings.HasPrefix(p.Type, problemPrefix) {
		snippet := strings.TrimSpace(string(data))
		if len(snippet) > 200 {
			snippet = snippet[:200] + "..."
		}
		return fmt.Errorf("leasehold server: unexpected answer %s (not a leasehold problem document): %s", resp.Status, snippet)
	}
	typ := strings.TrimPrefix(p.Type, problemPrefix)
	switch typ {
	case "held":
		he := &leasehold.HeldError{Name: name}
		if p.Holder != nil {
			he.Owner, he.Token = p.Holder.Owner, p.Holder.Token
			he.Remaining = time.Duration(p.Holder.RemainingMS) * time.Millisecond
			he.Acquired, _ = time.Parse(time.RFC3339Nano, p.Holder.Acquired)
		}
		return he
	case "not-held":
		return leasehold.ErrNotHeld
	case "not-found":
		return leasehold.ErrNotFound
	case "invalid":
		field, reason := p.Field, p.Reason
		if field == "" {
			field = "request"
		}
		if reason == "" {
			reason = p.Detail
		}
		return &leasehold.InvalidError{Field: field, Reason: reason}
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
	var lj leaseJSON
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", req.Name, "acquire"),
		body: s.acquireBody(req, wait), replayable: req.RequestID != "", wait: wait, name: req.Name,
	}, &lj)
	if err != nil {
		return leasehold.Record{}, err
	}
	rec, err := lj.record()
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
		req.RequestID = randomID(12)
	}
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
			s.reclaim(req)
			return leasehold.Record{}, ctx.Err()
		}
		if errors.Is(err, leasehold.ErrHeld) {
			continue // the long-poll ran out: wait again
		}
		var pe *ProblemError
		if errors.As(err, &pe) && pe.Type == "unavailable" {
			// The server is shutting down or not ready: wait a little
			// and ask again (another instance, or the restarted one).
			t := time.NewTimer(max(pe.RetryAfter/4, 50*time.Millisecond) + time.Duration(mrand.Int64N(int64(50*time.Millisecond))))
			select {
			case <-ctx.Done():
				t.Stop()
				return leasehold.Record{}, ctx.Err()
			case <-t.C:
			}
			continue
		}
		return leasehold.Record{}, err
	}
}

// reclaim releases a grant that may have raced with the end of a wait: if
// the lease is held by req's owner, an acquire with req's request id gets
// that grant back (and only that one), and it is released.
func (s *HTTPStore) reclaim(req leasehold.AcquireRequest) {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	rec, err := s.Get(ctx, req.Name)
	if err != nil || rec.Owner != req.Owner {
		return
	}
	if got, err := s.acquire(ctx, req, 0); err == nil {
		_ = s.Release(ctx, req.Name, req.Owner, got.Token)
	}
}

type renewJSON struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	TTLMS  int64  `json:"ttl_ms"`
	Secret string `json:"secret,omitempty"`
}

// Renew implements leasehold.Store. It sends the grant's secret if this
// store acquired the grant (and the server gave one); a server with holder
// proofs refuses a renew without the right one with an error matching
// ErrBadProof and leasehold.ErrNotHeld.
func (s *HTTPStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := leasehold.ValidateTTL(ttl); err != nil {
		return err
	}
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", name, "renew"),
		body:       renewJSON{Owner: owner, Token: token, TTLMS: ceilMS(ttl), Secret: s.secrets.get(name, owner, token)},
		replayable: true, name: name,
	}, nil)
	s.secrets.settle(name, owner, token, ttl, err)
	return err
}

type releaseJSON struct {
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	Secret string `json:"secret,omitempty"`
}

// Release implements leasehold.Store. Like Renew, it sends the grant's
// secret if this store has it.
func (s *HTTPStore) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := leasehold.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	_, err := s.do(ctx, call{
		method: http.MethodPost, path: s.namePath("leases", name, "release"),
		body:       releaseJSON{Owner: owner, Token: token, Secret: s.secrets.get(name, owner, token)},
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
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	var lj leaseJSON
	if _, err := s.do(ctx, call{method: http.MethodPost, path: s.namePath("leases", name, "force-release"), body: struct{}{}, name: name}, &lj); err != nil {
		return leasehold.Record{}, err
	}
	return lj.record()
}

// Get implements leasehold.Store.
func (s *HTTPStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := leasehold.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	var lj leaseJSON
	if _, err := s.do(ctx, call{method: http.MethodGet, path: s.namePath("leases", name, ""), name: name}, &lj); err != nil {
		return leasehold.Record{}, err
	}
	return lj.record()
}

// List implements leasehold.Store. With auth on, it lists only the leases
// the token may read. The server answers in pages (of up to 10,000
// leases); List asks for the next one, after the last name of the page
// before, until there are no more. A lease held throughout is listed once;
// one granted or freed meanwhile may or may not be.
func (s *HTTPStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := leasehold.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var recs []leasehold.Record
	after := ""
	for {
		var out struct {
			Leases []leaseJSON `json:"leases"`
			Next   string      `json:"next"`
		}
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
			r, err := out.Leases[i].record()
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
	if err := leasehold.ValidateName(name); err != nil {
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
		delay := 50 * time.Millisecond
		for {
			readEvents(body, notify)
			body.Close()
			if wctx.Err() != nil {
				return
			}
			notify()
			for {
				t := time.NewTimer(delay/2 + time.Duration(mrand.Int64N(int64(delay))))
				select {
				case <-wctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				delay = min(2*delay, 5*time.Second)
				if body, err = s.openEvents(wctx, name); err == nil {
					delay = 50 * time.Millisecond
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
		ev, ok := strings.CutPrefix(sc.Text(), "event:")
		if !ok {
			continue
		}
		switch strings.TrimSpace(ev) {
		case "released", "expired", "forced", "dequeued", "overflow":
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

type sessionJSON struct {
	ID          string `json:"id"`
	TTLMS       int64  `json:"ttl_ms"`
	RemainingMS int64  `json:"remaining_ms"`
}

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
	var sj sessionJSON
	if _, err := s.do(ctx, call{method: http.MethodPost, path: "/v1/sessions", body: map[string]int64{"ttl_ms": ceilMS(ttl)}}, &sj); err != nil {
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

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
