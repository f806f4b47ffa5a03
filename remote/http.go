package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

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
	// ErrQuotaExceeded: the client (identity, or address with auth off)
	// is at one of the server's quotas (leases, data, sessions, waiters);
	// nothing was changed. Retrying does not help until it holds less.
	ErrQuotaExceeded = errors.New("leasehold server: quota exceeded")
	ErrUnavailable   = errors.New("leasehold server: unavailable")
	// ErrNoSession reports an unknown, closed or expired session.
	ErrNoSession = errors.New("leasehold server: no such session (unknown, closed or expired)")
)

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
	// sess, when set, is the session every acquire attaches to.
	sess *Session
	// borrowed stores (Session.Store) do not close the connection pool.
	borrowed bool
}

// conn is what the stores of one OpenHTTP share: the client core (its
// ctx ends watches and sessions at Close; its secrets are those of the
// grants acquired by any store of this connection, sessions' stores too),
// over the HTTP transport.
type conn struct {
	core

	base    string // scheme://host[:port][/path], without a trailing slash
	token   string
	client  *http.Client
	timeout time.Duration
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
	c := &conn{
		base:    u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/"),
		token:   token,
		client:  &http.Client{Transport: tr, CheckRedirect: noRedirects},
		timeout: timeout,
	}
	c.core.init(c, waitPolicy{
		chunk: longPoll,
		// A long-poll is cancelled with its ctx, and its answer lost.
		cancelLosesReply: true,
		retry:            retryUnavailable,
	})
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
// It first awaits (2 s at most) the give-ups of waits whose callers gave
// up, so that a process that closes its store before it exits leaves no
// place in the server's queue behind.
func (s *HTTPStore) Close() error {
	if s.borrowed {
		return nil
	}
	s.awaitGiveUps()
	if s.closed.Swap(true) {
		return nil
	}
	s.cancel()
	s.client.CloseIdleConnections()
	return nil
}

// --- leasehold.Store (the client core's, core.go) ---

// TryAcquire implements leasehold.Store: one attempt, no waiting.
func (s *HTTPStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.tryAcquire(ctx, req, s.bound())
}

// AcquireWait implements leasehold.Queuer: it waits in the server's FIFO
// queue for the lease, with long-polls of 30s repeated while ctx lives,
// and returns the grant, or ctx's error when ctx ends. Without a request
// id it makes one, so that its repeated requests never wait behind their
// own grant. Errors other than "held" (a transient failure, invalid
// input, refused credentials) are returned at once.
//
// Between two long-polls the server keeps the waiter's place in its queue
// (for 5 s, server.ParkGrace), so waiting longer than one poll keeps the
// arrival order. When ctx ends during a long-poll, the server drops the
// waiter; if the grant raced with the end, AcquireWait releases it (best
// effort; else it expires after its TTL). A wait that ends as its caller
// gives up gives up its place (a try with its request id: a place kept
// after a poll that ran out is left, a grant it got is released), in the
// background, which Close awaits; called with ctx already ended and a
// request id, it does so before it returns. Closing the store ends a wait
// at once with leasehold.ErrClosed, the same way.
func (s *HTTPStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.acquireWait(ctx, req, s.bound())
}

// bound is the session the store's acquires attach to, or nil.
func (s *HTTPStore) bound() *keeper {
	if s.sess == nil {
		return nil
	}
	return s.sess.keeper
}

// Renew implements leasehold.Store. It sends the grant's secret if this
// store acquired the grant (and the server gave one); a server with holder
// proofs refuses a renew without the right one with an error matching
// ErrBadProof and leasehold.ErrNotHeld.
func (s *HTTPStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	return s.renew(ctx, name, owner, token, ttl)
}

// Release implements leasehold.Store. Like Renew, it sends the grant's
// secret if this store has it.
func (s *HTTPStore) Release(ctx context.Context, name, owner string, token uint64) error {
	return s.release(ctx, name, owner, token)
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
	return s.lease(ctx, name, true)
}

// Get implements leasehold.Store.
func (s *HTTPStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return s.lease(ctx, name, false)
}

// List implements leasehold.Store. With auth on, it lists only the leases
// the token may read. The server answers in pages (of up to 10,000
// leases); List asks for the next one, after the last name of the page
// before, until there are no more. A lease held throughout is listed once;
// one granted or freed meanwhile may or may not be.
func (s *HTTPStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return s.list(ctx, prefix)
}

// Ready asks the server whether it can serve (GET /readyz).
func (s *HTTPStore) Ready(ctx context.Context) error {
	return s.ready(ctx)
}
