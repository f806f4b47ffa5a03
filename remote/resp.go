package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/wire/resp"
)

// DefaultRESPPort is the port of a leasehold:// URL that names none.
const DefaultRESPPort = "7071"

// RESPStore is a leasehold.Store and leasehold.Queuer that talks to a
// leasehold server over its RESP protocol (docs/protocol.md), the fastest
// way to reach it.
//
// Non-blocking commands are auto-pipelined: concurrent callers share a few
// connections (conns, default 2); while one batch of commands is being
// written the next accumulates, and it goes out with one write. Replies
// come back in order and are matched to their callers. A blocking acquire
// (AcquireWait, which Client.Acquire uses) runs on a dedicated connection of
// its own, so it holds up no one else's replies; a few such connections are
// kept idle for reuse.
//
// When a connection breaks, the requests in flight on it fail with an
// error that says they may or may not have taken effect (Client retries an
// acquire with the same request id, which recognises a grant it already
// got), and the next request connects again.
//
// Errors map back to the root package's: *leasehold.HeldError (owner,
// token, remaining time), leasehold.ErrNotHeld, leasehold.ErrNotFound,
// *leasehold.InvalidError (field and reason); leasehold.ErrClosed after
// Close. Refusals by the server are *RESPError values matching
// ErrUnauthorized, ErrForbidden, ErrRateLimited, ErrUnavailable,
// ErrNoSession or ErrBadProof with errors.Is.
//
// With holder proofs on the server, each grant's secret is kept and sent
// with its Renew and Release (see ErrBadProof, HolderSecret).
type RESPStore struct {
	core // the client core, over this store as its transport

	cl      *resp.Client
	addr    string
	timeout time.Duration

	subOnce sync.Once
	sub     *resp.Subscriber // Watch's connection, made on first use
}

var (
	_ leasehold.Store   = (*RESPStore)(nil)
	_ leasehold.Queuer  = (*RESPStore)(nil)
	_ leasehold.Watcher = (*RESPStore)(nil)
)

// OpenRESP connects to a leasehold server's RESP port:
//
//	leasehold://host[:port][?token=T&conns=N&timeout=30s]
//	leaseholds://host[:port][?token=T&ca=/path/ca.pem]   (TLS)
//
// The port defaults to 7071. Parameters:
//
//   - token: the bearer token sent with AUTH (default: $LEASEHOLD_AUTH_TOKEN,
//     else none).
//   - conns: shared pipelined connections (default 2, at most 64).
//   - idle_conns: idle dedicated connections kept for blocking acquires
//     (default 4).
//   - timeout: how long requests may go unanswered on a pipelined
//     connection before it is taken for dead and closed, failing them
//     (default DefaultTimeout, 30s). Blocking acquires are bounded by
//     wait_chunk plus this instead.
//   - wait_chunk: how long one server-side wait of AcquireWait lasts before
//     the client asks again (default 30s).
//   - with leaseholds:// only: ca (PEM file of authorities to trust instead
//     of the system's), cert and key (a client certificate), server_name.
//
// A bad URL is an *leasehold.InvalidError. OpenRESP connects and
// authenticates once before it returns, so that a wrong address or token
// is reported here.
func OpenRESP(rawURL string) (*RESPStore, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return openRESP(ctx, rawURL)
}

type respConfig struct {
	addr      string
	token     string
	tls       *tls.Config
	conns     int
	idle      int
	timeout   time.Duration
	waitChunk time.Duration
}

func parseRESPURL(rawURL string) (respConfig, error) {
	cfg := respConfig{conns: 2, idle: 4, timeout: DefaultTimeout, waitChunk: 30 * time.Second}
	bad := func(format string, args ...any) (respConfig, error) {
		return cfg, &leasehold.InvalidError{Field: "store URL", Reason: fmt.Sprintf(format, args...)}
	}
	u, err := parseURL(rawURL)
	if err != nil {
		return cfg, err
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch {
	case u.Scheme != "leasehold" && u.Scheme != "leaseholds":
		return bad("scheme %q: want leasehold or leaseholds", u.Scheme)
	case u.Hostname() == "":
		return bad("no host (want %s://host:port)", u.Scheme)
	case u.User != nil:
		return bad("credentials in the URL's user part are not used; pass ?token= or $%s", EnvAuthToken)
	case u.Path != "" && u.Path != "/":
		return bad("a path (%q) is not allowed: a server has one namespace", u.Path)
	case u.Fragment != "":
		return bad("no fragment allowed")
	}
	port := u.Port()
	if port == "" {
		port = DefaultRESPPort
	}
	cfg.addr = net.JoinHostPort(u.Hostname(), port)
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	var ca, cert, key, serverName string
	for k, vs := range q {
		if len(vs) != 1 {
			return bad("parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "token":
			cfg.token = v
		case "conns", "idle_conns":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 64 {
				return bad("%s=%q: want a number from 1 to 64", k, v)
			}
			if k == "conns" {
				cfg.conns = n
			} else {
				cfg.idle = n
			}
		case "timeout", "wait_chunk":
			d, err := time.ParseDuration(v)
			if err != nil || d < 100*time.Millisecond || d > time.Hour {
				return bad("%s=%q: want a duration from 100ms to 1h", k, v)
			}
			if k == "timeout" {
				cfg.timeout = d
			} else {
				cfg.waitChunk = d
			}
		case "ca":
			ca = v
		case "cert":
			cert = v
		case "key":
			key = v
		case "server_name":
			serverName = v
		default:
			return bad("unknown parameter %q (known: token, conns, idle_conns, timeout, wait_chunk, ca, cert, key, server_name)", k)
		}
	}
	if cfg.token == "" {
		cfg.token = os.Getenv(EnvAuthToken)
	}
	if u.Scheme != "leaseholds" {
		if ca != "" || cert != "" || key != "" || serverName != "" {
			return bad("ca, cert, key and server_name need a leaseholds:// URL")
		}
		return cfg, nil
	}
	if serverName == "" {
		serverName = u.Hostname()
	}
	if cfg.tls, err = clientTLS(serverName, ca, cert, key); err != nil {
		return bad("%v", err)
	}
	return cfg, nil
}

func openRESP(ctx context.Context, rawURL string) (*RESPStore, error) {
	cfg, err := parseRESPURL(rawURL)
	if err != nil {
		return nil, err
	}
	return newRESPStore(ctx, cfg)
}

func newRESPStore(ctx context.Context, cfg respConfig) (*RESPStore, error) {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}
	dial := func(ctx context.Context) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", cfg.addr) }
	if cfg.tls != nil {
		td := &tls.Dialer{NetDialer: dialer, Config: cfg.tls}
		dial = func(ctx context.Context) (net.Conn, error) { return td.DialContext(ctx, "tcp", cfg.addr) }
	}
	var init func(c *resp.Conn) error
	if cfg.token != "" {
		token := cfg.token
		init = func(c *resp.Conn) error {
			return c.Do(func(b []byte) []byte { return resp.AppendCommand(b, "AUTH", token) }, expectOK(""))
		}
	}
	s := &RESPStore{addr: cfg.addr, timeout: cfg.timeout}
	// A waiting acquire's reply is still read a moment after its ctx
	// ended (resp.Client.DoBlocking): a grant it brings is released.
	s.core.init(s, waitPolicy{chunk: cfg.waitChunk, releaseEnded: true})
	s.cl = resp.NewClient(resp.ClientOptions{
		Dial: dial, Init: init, Conns: cfg.conns, MaxIdle: cfg.idle, Timeout: cfg.timeout,
		MaxArray: 1 << 24, // LH.LIST may return many leases; memory still follows the bytes received
	})
	if err := s.cl.Connect(ctx); err != nil {
		s.cl.Close()
		s.cancel()
		return nil, s.mapErr(err)
	}
	return s, nil
}

// Close closes the store's connections. Requests in flight fail; later
// calls return leasehold.ErrClosed. Leases held through the store are not
// released; the sessions opened on it end (Err matches leasehold.ErrLost),
// and so the leases taken through them are lost at once (the server frees
// them when the sessions expire). It first awaits (2 s at most) the
// give-ups of waits whose callers gave up, so that a process that closes
// its store before it exits leaves no place in the server's queue behind.
func (s *RESPStore) Close() error {
	if !s.closed.Load() {
		s.awaitGiveUps()
	}
	s.closed.Store(true)
	s.cancel()
	s.subOnce.Do(func() {}) // no subscriber from now on
	if s.sub != nil {
		s.sub.Close()
	}
	return s.cl.Close()
}

// Watch implements leasehold.Watcher: the channel receives a value when the
// named lease is released, expires or is force-released (and once after a
// reconnection, since notifications may have been missed). All of a
// store's watches share one connection in the server's watch mode
// (LH.SUBSCRIBE). The channel is closed after ctx ends or the store is
// closed.
func (s *RESPStore) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	s.subOnce.Do(func() {
		s.sub = resp.NewSubscriber(resp.SubscriberOptions{
			Connect: s.cl.Dial,
			Subscribe: func(b []byte, name string) []byte {
				return resp.AppendCommand(b, "LH.SUBSCRIBE", name)
			},
			Unsubscribe: func(b []byte, name string) []byte {
				return resp.AppendCommand(b, "LH.UNSUBSCRIBE", name)
			},
			Push: func(v resp.Value) (string, bool) {
				a := v.Array
				if v.Type != resp.Array || len(a) != 3 || a[0].Type != resp.BulkString || string(a[0].Str) != "freed" {
					return "", false
				}
				if string(a[2].Str) == "overflow" {
					return "", true
				}
				return string(a[1].Str), true
			},
			Reply: func(v resp.Value) error {
				switch {
				case v.Type == resp.Error:
					return replyErr(v.Str, "")
				case v.Type != resp.Array || len(v.Array) != 3:
					return errors.New("unexpected reply to LH.SUBSCRIBE")
				}
				return nil
			},
			AckTimeout: s.timeout,
		})
	})
	if s.sub == nil {
		return nil, leasehold.ErrClosed
	}
	ch, err := s.sub.Subscribe(ctx, name)
	if err != nil {
		return nil, s.mapErr(err)
	}
	return ch, nil
}

// TryAcquire implements leasehold.Store.
func (s *RESPStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.tryAcquire(ctx, req, nil)
}

// AcquireWait implements leasehold.Queuer: it waits in the server's FIFO
// queue for the lease, on a dedicated connection, until it is granted or
// ctx ends. The wait is asked for in chunks (wait_chunk, default 30s) with
// the same request id; between chunks the server keeps the waiter's place
// in its queue (for 5 s, server.ParkGrace). If ctx ends mid-wait the
// connection's sending side is closed, which makes the server drop the
// waiter, and its reply is read: a grant that raced with the end is
// released (and, if no reply came, looked for and released). A wait that
// ends as its caller gives up gives up its place (a try with its request
// id: a place kept after a poll that ran out is left, a grant it got is
// released), in the background; called with ctx already ended and a
// request id, it does so before it returns. Closing the store ends a wait
// at once with leasehold.ErrClosed.
func (s *RESPStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return s.acquireWait(ctx, req, nil)
}

// Renew implements leasehold.Store. It sends the grant's secret (SECRET)
// if this store acquired the grant (and the server gave one); a server
// with holder proofs refuses a renew without the right one with an error
// matching ErrBadProof and leasehold.ErrNotHeld.
func (s *RESPStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	return s.renew(ctx, name, owner, token, ttl)
}

// Release implements leasehold.Store. Like Renew, it sends the grant's
// secret if this store has it.
func (s *RESPStore) Release(ctx context.Context, name, owner string, token uint64) error {
	return s.release(ctx, name, owner, token)
}

// HolderSecret returns the secret (holder proof) of a grant acquired
// through this store and not ended since, or "" if it has none (the
// server gives none, or the grant was acquired elsewhere). A process that
// hands a grant to another (to release it early, say) hands over the
// secret too: the other's store takes it with SetHolderSecret. Treat it
// as a credential.
func (s *RESPStore) HolderSecret(name, owner string, token uint64) string {
	return s.secrets.get(name, owner, token)
}

// SetHolderSecret gives the store the secret of a grant acquired
// elsewhere, so that its Renew and Release of the grant send it. It is
// kept until the grant is released or found not held, or a minute after
// the last renewal through this store (or after this call).
func (s *RESPStore) SetHolderSecret(name, owner string, token uint64, secret string) {
	s.secrets.importSecret(name, owner, token, secret)
}

// Get implements leasehold.Store.
func (s *RESPStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return s.lease(ctx, name, false)
}

// Ready reports nil when the server can serve (its log is open, its engine
// reachable).
func (s *RESPStore) Ready(ctx context.Context) error {
	return s.ready(ctx)
}

// ForceRelease frees the named lease whoever holds it (it needs admin
// access) and returns the grant it ended, or leasehold.ErrNotFound.
func (s *RESPStore) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	return s.lease(ctx, name, true)
}

// List implements leasehold.Store. With auth on, only the leases the token
// may read are listed. It reads the leases page by page with LH.SCAN
// (the server caps LH.LIST): a lease held throughout is listed once; one
// granted or freed meanwhile may or may not be.
func (s *RESPStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return s.list(ctx, prefix)
}
