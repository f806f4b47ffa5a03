package remote_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// The behaviour tests of this package are written once and run over both
// transports, HTTP and RESP: a transport knows how to serve a backend on a
// listener and how to open its store and sessions. Tests of one transport
// alone (its URL options, its wire errors, RESP's reconnection, HTTP's
// records) name it.

// serveOptions are a test server's options, for either transport.
type serveOptions struct {
	Auth    *server.Auth
	Holders *server.HolderProofs
	Limits  *server.Limits
	TLS     *tls.Config // serve https:// or leaseholds://
	MaxList int         // RESP's cap on LH.LIST (HTTP's page is server.HTTPMaxListLimit)
	Quotas  *server.Quotas
}

// withQuotas is b under o's quotas, if any.
func (o serveOptions) withQuotas(b server.Backend) server.Backend {
	if o.Quotas == nil {
		return b
	}
	return server.WithQuotas(b, *o.Quotas, nil)
}

// remoteStore is what the tests use of either transport's store.
type remoteStore interface {
	leasehold.Store
	leasehold.Queuer
	leasehold.Watcher
	ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
	Ready(ctx context.Context) error
	HolderSecret(name, owner string, token uint64) string
	SetHolderSecret(name, owner string, token uint64, secret string)
}

// remoteSession is what the tests use of either transport's session.
type remoteSession interface {
	leasehold.Bound
	ID() string
	TTL() time.Duration
	Close(context.Context) error
	Store() leasehold.Store
}

// httpSession gives remote.Session's Store (an *HTTPStore) as a
// leasehold.Store.
type httpSession struct{ *remote.Session }

func (s httpSession) Store() leasehold.Store { return s.Session.Store() }

type transport struct {
	name      string
	scheme    string // of a plain URL
	tlsScheme string // of a TLS URL
	// serve serves b on ln until stop; stop leaves b open.
	serve func(t testing.TB, ln net.Listener, b server.Backend, o serveOptions) (stop func())
	// open opens a store at url without touching a test.
	open func(url string) (remoteStore, error)
	// openSession opens a session on s, a store of this transport.
	openSession func(ctx context.Context, s remoteStore, ttl time.Duration, opts ...remote.SessionOption) (remoteSession, error)
}

var (
	httpTransport = transport{
		name: "http", scheme: "http://", tlsScheme: "https://",
		serve: func(t testing.TB, ln net.Listener, b server.Backend, o serveOptions) func() {
			srv := httptest.NewUnstartedServer(server.NewHandler(o.withQuotas(b), server.HandlerOptions{Auth: o.Auth, Holders: o.Holders, Limits: o.Limits}))
			srv.Listener.Close()
			srv.Listener = ln
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused TLS handshakes are expected
			if o.TLS != nil {
				srv.TLS = o.TLS
				srv.StartTLS()
			} else {
				srv.Start()
			}
			return func() { srv.CloseClientConnections(); srv.Close() }
		},
		open: storeOpener(remote.OpenHTTP),
		openSession: sessionOpener((*remote.HTTPStore).OpenSession, func(x *remote.Session) remoteSession {
			return httpSession{x}
		}),
	}
	respTransport = transport{
		name: "resp", scheme: "leasehold://", tlsScheme: "leaseholds://",
		serve: func(t testing.TB, ln net.Listener, b server.Backend, o serveOptions) func() {
			srv := server.NewRESPServer(o.withQuotas(b), server.RESPOptions{Auth: o.Auth, Holders: o.Holders, Limits: o.Limits, TLS: o.TLS, MaxList: o.MaxList})
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			return func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := srv.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
				if err := <-done; !errors.Is(err, server.ErrRESPServerClosed) {
					t.Errorf("Serve returned %v", err)
				}
			}
		},
		open: storeOpener(remote.OpenRESP),
		openSession: sessionOpener((*remote.RESPStore).OpenSession, func(x *remote.RESPSession) remoteSession {
			return x
		}),
	}
	transports = []transport{httpTransport, respTransport}
)

// storeOpener makes a transport's open of its package function (which
// returns a nil interface, not a nil *Store, on error).
func storeOpener[S remoteStore](open func(url string) (S, error)) func(string) (remoteStore, error) {
	return func(url string) (remoteStore, error) {
		s, err := open(url)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// sessionOpener makes a transport's openSession of its store's OpenSession
// method and wrap, which gives the session as a remoteSession.
func sessionOpener[S remoteStore, X any](open func(S, context.Context, time.Duration, ...remote.SessionOption) (X, error), wrap func(X) remoteSession) func(context.Context, remoteStore, time.Duration, ...remote.SessionOption) (remoteSession, error) {
	return func(ctx context.Context, s remoteStore, ttl time.Duration, opts ...remote.SessionOption) (remoteSession, error) {
		x, err := open(s.(S), ctx, ttl, opts...)
		if err != nil {
			return nil, err
		}
		return wrap(x), nil
	}
}

// eachTransport runs f as a subtest for each transport.
func eachTransport(t *testing.T, f func(t *testing.T, tr transport)) {
	t.Helper()
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { f(t, tr) })
	}
}

// testServer serves a backend over one transport on a loopback port. Over
// an engine it opened, restart closes server and engine and opens the same
// data (cfg.Dir) again on the same port.
type testServer struct {
	t    testing.TB
	tr   transport
	cfg  server.EngineConfig
	opts serveOptions
	addr string

	mu       sync.Mutex
	b        server.Backend
	stopServ func()
}

// startEngine serves an engine opened with cfg until the test ends.
func startEngine(t testing.TB, tr transport, cfg server.EngineConfig, opts serveOptions) *testServer {
	ts := &testServer{t: t, tr: tr, cfg: cfg, opts: opts, addr: "127.0.0.1:0"}
	ts.start(nil)
	t.Cleanup(ts.stop)
	return ts
}

// startBackend serves b until the test ends, and then closes it.
func startBackend(t testing.TB, tr transport, b server.Backend, opts serveOptions) *testServer {
	ts := &testServer{t: t, tr: tr, opts: opts, addr: "127.0.0.1:0"}
	ts.start(b)
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) start(b server.Backend) {
	if b == nil {
		eng, err := server.OpenEngine(ts.cfg)
		if err != nil {
			ts.t.Fatal(err)
		}
		b = eng
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the old port may take a moment to come free
		if ln, err = net.Listen("tcp", ts.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		ts.t.Fatal(err)
	}
	stop := ts.tr.serve(ts.t, ln, b, ts.opts)
	ts.mu.Lock()
	ts.b, ts.stopServ, ts.addr = b, stop, ln.Addr().String()
	ts.mu.Unlock()
}

func (ts *testServer) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.stopServ == nil {
		return
	}
	ts.stopServ()
	ts.b.Close()
	ts.stopServ, ts.b = nil, nil
}

// restart stops the server and starts it again on the same port and data.
func (ts *testServer) restart() {
	ts.stop()
	ts.start(nil)
}

// hostPort is the server's address.
func (ts *testServer) hostPort() string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.addr
}

// url is the server's URL with query (which starts with "?" if not empty).
func (ts *testServer) url(query string) string {
	scheme := ts.tr.scheme
	if ts.opts.TLS != nil {
		scheme = ts.tr.tlsScheme
	}
	return scheme + ts.hostPort() + query
}

func (ts *testServer) backend() server.Backend {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.b
}

// open opens a store on the server, closed (if it is not yet) when t
// ends.
func (ts *testServer) open(t testing.TB, query string) remoteStore {
	t.Helper()
	s, err := ts.tr.open(ts.url(query))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openSession opens a session on s.
func (ts *testServer) openSession(t testing.TB, ctx context.Context, s remoteStore, ttl time.Duration) remoteSession {
	t.Helper()
	sess, err := ts.tr.openSession(ctx, s, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waiters waits until name has n waiters queued on the server.
func (ts *testServer) waiters(t *testing.T, name string, n int) {
	t.Helper()
	servertest.WaitFor(t, "the queue of "+name, func() bool { return len(ts.backend().Waiters(name)) == n })
}

// ended checks that x, a lease or a session, has ended with an error
// matching each of want: at once if within is 0, else within that time.
func ended(t *testing.T, what string, x interface {
	Done() <-chan struct{}
	Err() error
}, within time.Duration, want ...error) {
	t.Helper()
	if within == 0 {
		select {
		case <-x.Done():
		default:
			t.Fatalf("%s: Done not closed", what)
		}
	} else {
		select {
		case <-x.Done():
		case <-time.After(within):
			t.Fatalf("%s: not ended within %s", what, within)
		}
	}
	for _, w := range want {
		if !errors.Is(x.Err(), w) {
			t.Fatalf("%s: Err = %v, want %v", what, x.Err(), w)
		}
	}
}
