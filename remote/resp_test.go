package remote_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/storetest"
)

// respServer is a RESP server over a Backend on a loopback port. With an
// engine directory, restart closes server and engine and opens the same
// data again on the same port.
type respServer struct {
	t    testing.TB
	dir  string
	cfg  server.EngineConfig
	opts server.RESPOptions
	addr string

	mu   sync.Mutex
	b    server.Backend
	srv  *server.RESPServer
	done chan error
}

func startRESPEngine(t testing.TB, cfg server.EngineConfig, opts server.RESPOptions) *respServer {
	rs := &respServer{t: t, cfg: cfg, opts: opts, addr: "127.0.0.1:0"}
	rs.start(nil)
	t.Cleanup(rs.stop)
	return rs
}

func startRESPBackend(t testing.TB, b server.Backend, opts server.RESPOptions) *respServer {
	rs := &respServer{t: t, opts: opts, addr: "127.0.0.1:0"}
	rs.start(b)
	t.Cleanup(rs.stop)
	return rs
}

func (rs *respServer) start(b server.Backend) {
	if b == nil {
		eng, err := server.OpenEngine(rs.cfg)
		if err != nil {
			rs.t.Fatal(err)
		}
		b = eng
	}
	var ln net.Listener
	var err error
	for i := 0; i < 100; i++ { // the old port may take a moment to come free
		if ln, err = net.Listen("tcp", rs.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		rs.t.Fatal(err)
	}
	srv := server.NewRESPServer(b, rs.opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	rs.mu.Lock()
	rs.b, rs.srv, rs.done, rs.addr = b, srv, done, ln.Addr().String()
	rs.mu.Unlock()
}

func (rs *respServer) stop() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rs.srv.Shutdown(ctx); err != nil {
		rs.t.Errorf("Shutdown: %v", err)
	}
	if err := <-rs.done; !errors.Is(err, server.ErrRESPServerClosed) {
		rs.t.Errorf("Serve returned %v", err)
	}
	rs.b.Close()
	rs.srv, rs.b = nil, nil
}

// restart stops the server and starts it again on the same port and data.
func (rs *respServer) restart() {
	rs.stop()
	rs.start(nil)
}

func (rs *respServer) url(query string) string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return "leasehold://" + rs.addr + query
}

func (rs *respServer) backend() server.Backend {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.b
}

func (rs *respServer) open(t testing.TB, query string) *remote.RESPStore {
	t.Helper()
	s, err := remote.OpenRESP(rs.url(query))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRESPConformanceEngine runs the whole conformance suite over RESP
// against the durable engine; Reopen restarts the server on the same data.
func TestRESPConformanceEngine(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{Dir: t.TempDir()}, server.RESPOptions{})
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return rs.open(t, "") },
		Reopen: func(t testing.TB, s leasehold.Store) leasehold.Store {
			s.Close()
			rs.restart()
			return rs.open(t, "")
		},
	})
}

// TestRESPConformanceProxy runs the suite over RESP against a Proxy in
// front of the memory store.
func TestRESPConformanceProxy(t *testing.T) {
	rs := startRESPBackend(t, server.NewProxy(memory.New(), server.ProxyConfig{}), server.RESPOptions{})
	storetest.Run(t, storetest.Harness{
		Open: func(t testing.TB) leasehold.Store { return rs.open(t, "?conns=1") },
	})
}

func respCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func respWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestOpenRESPURLs(t *testing.T) {
	for _, bad := range []string{
		"redis://host", "leasehold://", "leasehold://:7071", "leasehold://u:p@host", "leasehold://host/ns",
		"leasehold://host?nope=1", "leasehold://host?conns=0", "leasehold://host?conns=65", "leasehold://host?conns=x",
		"leasehold://host?timeout=1ms", "leasehold://host?wait_chunk=2h", "leasehold://host?token=a&token=b",
		"leasehold://host?ca=/x", "leaseholds://host?ca=/does/not/exist", "leaseholds://host?cert=/x",
		"leasehold://host#frag",
	} {
		if _, err := remote.OpenRESP(bad); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("OpenRESP(%q) = %v, want an *InvalidError", bad, err)
		}
	}
	// Nothing listens on port 1: the error comes from connecting.
	if _, err := remote.OpenRESP("leasehold://127.0.0.1:1?conns=3&idle_conns=2&timeout=2s&wait_chunk=5s&token=x"); err == nil || errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("OpenRESP of a closed port: %v", err)
	}
}

// TestOpen: remote.Open picks the protocol by scheme.
func TestOpen(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	ctx := respCtx(t)
	s, err := remote.Open(ctx, rs.url(""))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*remote.RESPStore); !ok {
		t.Errorf("Open(leasehold://) = %T", s)
	}
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "open/x", Owner: "o", TTL: time.Minute}); err != nil {
		t.Error(err)
	}
	h, err := remote.Open(ctx, "http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, ok := h.(*remote.HTTPStore); !ok {
		t.Errorf("Open(http://) = %T", h)
	}
	for _, bad := range []string{"ftp://x", "leasehold://", "::"} {
		if s, err := remote.Open(ctx, bad); err == nil || s != nil {
			t.Errorf("Open(%q) = %v, %v", bad, s, err)
		}
	}
}

func TestRESPErrorsMapBack(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	s := rs.open(t, "")
	defer s.Close()
	ctx := respCtx(t)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "a b", TTL: time.Minute, Data: []byte{0xff, 0}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "b", TTL: time.Minute})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != "a b" || he.Token != rec.Token || he.Name != "m/x" || he.Remaining <= 0 || he.Acquired.IsZero() {
		t.Errorf("held: %#v", err)
	}
	if err := s.Renew(ctx, "m/x", "b", rec.Token, time.Minute); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Errorf("renew by another: %v", err)
	}
	if _, err := s.Get(ctx, "m/none"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("get of none: %v", err)
	}
	// The server's own name rules come back as *InvalidError with the field.
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "m/../x", Owner: "a", TTL: time.Minute})
	var ie *leasehold.InvalidError
	if !errors.As(err, &ie) || ie.Field != "name" || ie.Reason == "" {
		t.Errorf("dot-dot name: %#v", err)
	}
	if got, err := s.ForceRelease(ctx, "m/x"); err != nil || got.Token != rec.Token || got.Owner != "a b" {
		t.Errorf("force release: %+v, %v", got, err)
	}
	if _, err := s.ForceRelease(ctx, "m/x"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("second force release: %v", err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Errorf("ready: %v", err)
	}
	s.Close()
	if _, err := s.Get(ctx, "m/x"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("after close: %v", err)
	}
	if _, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "m/x", Owner: "a", TTL: time.Minute}); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("AcquireWait after close: %v", err)
	}
}

func TestRESPAuthErrors(t *testing.T) {
	auth, err := server.NewAuth(server.AuthConfig{Tokens: []server.TokenConfig{
		{Identity: "reader", Token: "r", Grants: []server.Grant{{Prefix: "", Access: "read"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{Auth: auth, Limits: &server.Limits{PerSecond: 0.001, Burst: 4}})
	ctx := respCtx(t)
	req := leasehold.AcquireRequest{Name: "a/x", Owner: "o", TTL: time.Minute}
	none := rs.open(t, "")
	defer none.Close()
	var re *remote.RESPError
	if _, err := none.TryAcquire(ctx, req); !errors.Is(err, remote.ErrUnauthorized) || !errors.As(err, &re) || re.Code != "NOAUTH" {
		t.Errorf("no token: %v", err)
	}
	if _, err := remote.OpenRESP(rs.url("?token=wrong")); !errors.Is(err, remote.ErrUnauthorized) {
		t.Errorf("wrong token: %v", err)
	}
	reader := rs.open(t, "?token=r")
	defer reader.Close()
	if _, err := reader.TryAcquire(ctx, req); !errors.Is(err, remote.ErrForbidden) {
		t.Errorf("reader acquires: %v", err)
	}
	if _, err := reader.AcquireWait(ctx, req); !errors.Is(err, remote.ErrForbidden) {
		t.Errorf("reader waits: %v", err)
	}
	if recs, err := reader.List(ctx, ""); err != nil || len(recs) != 0 {
		t.Errorf("reader lists: %v, %v", recs, err)
	}
	t.Setenv(remote.EnvAuthToken, "r")
	env := rs.open(t, "")
	defer env.Close()
	if _, err := env.Get(ctx, "a/x"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("token from the environment: %v", err)
	}
	for i := 0; ; i++ {
		_, err := env.Get(ctx, "a/x")
		if errors.Is(err, remote.ErrRateLimited) {
			break
		}
		if !errors.Is(err, leasehold.ErrNotFound) || i > 10 {
			t.Fatalf("request %d over the rate limit: %v", i, err)
		}
	}
}

// TestRESPReconnect: when the server restarts, requests in flight fail
// with an error saying so, and the store reconnects by itself.
func TestRESPReconnect(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{Dir: t.TempDir()}, server.RESPOptions{})
	s := rs.open(t, "?conns=2")
	defer s.Close()
	ctx := respCtx(t)
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r/x", Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "r/x", Owner: "b", TTL: time.Minute})
		waitErr <- err
	}()
	respWaitFor(t, "the waiter to queue", func() bool { return len(rs.backend().Waiters("r/x")) == 1 })
	rs.restart()
	if err := <-waitErr; err == nil || errors.Is(err, leasehold.ErrHeld) {
		t.Errorf("AcquireWait across a restart: %v, want an error", err)
	}
	// Every shared connection broke; the first requests reconnect.
	for i := 0; i < 4; i++ {
		got, err := s.Get(ctx, "r/x")
		if err != nil {
			if !strings.Contains(err.Error(), "may or may not have taken effect") && !strings.Contains(err.Error(), "connect") {
				t.Errorf("request %d after the restart: %v", i, err)
			}
			continue
		}
		if got.Token != rec.Token || got.Owner != "a" {
			t.Errorf("lease after restart: %+v", got)
		}
	}
	if got, err := s.Get(ctx, "r/x"); err != nil || got.Token != rec.Token {
		t.Errorf("after reconnecting: %+v, %v", got, err)
	}
	if err := s.Release(ctx, "r/x", "a", rec.Token); err != nil {
		t.Error(err)
	}
}

// TestRESPAcquireWaitFIFO: waiters are granted in arrival order, each by
// the release of the one before.
func TestRESPAcquireWaitFIFO(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	s := rs.open(t, "")
	defer s.Close()
	ctx := respCtx(t)
	h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "f", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		rec leasehold.Record
		err error
	}
	order := make(chan grant, 4)
	for i, o := range []string{"a", "b", "c", "d"} {
		go func() {
			rec, err := s.AcquireWait(ctx, leasehold.AcquireRequest{Name: "f", Owner: o, TTL: time.Minute})
			order <- grant{rec, err}
		}()
		respWaitFor(t, "waiter "+o, func() bool { return len(rs.backend().Waiters("f")) == i+1 })
	}
	last := h
	var got []string
	for range 4 {
		if err := s.Release(ctx, "f", last.Owner, last.Token); err != nil {
			t.Fatal(err)
		}
		g := <-order
		if g.err != nil {
			t.Fatal(g.err)
		}
		if g.rec.Token <= last.Token {
			t.Errorf("token %d after %d", g.rec.Token, last.Token)
		}
		got = append(got, g.rec.Owner)
		last = g.rec
	}
	if strings.Join(got, "") != "abcd" {
		t.Errorf("grant order %v, want a b c d", got)
	}
}

// TestRESPAcquireWaitCancel: ending the context of a waiting acquire drops
// the waiter on the server (its connection is closed) and leaves the
// holder alone; the wait is also asked for again after each chunk.
func TestRESPAcquireWaitCancel(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	s := rs.open(t, "?wait_chunk=100ms")
	defer s.Close()
	ctx := respCtx(t)
	h, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "c", Owner: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "c", Owner: "w", TTL: time.Minute})
		done <- err
	}()
	respWaitFor(t, "the waiter to queue", func() bool { return len(rs.backend().Waiters("c")) == 1 })
	time.Sleep(350 * time.Millisecond) // several chunks
	select {
	case err := <-done:
		t.Fatalf("AcquireWait returned while the lease was held: %v", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("AcquireWait after cancel: %v", err)
	}
	respWaitFor(t, "the waiter to leave", func() bool { return len(rs.backend().Waiters("c")) == 0 })
	if got, err := s.Get(ctx, "c"); err != nil || got.Token != h.Token {
		t.Errorf("holder after a cancelled wait: %+v, %v", got, err)
	}
	// A deadline shorter than a chunk ends the wait at the deadline.
	dctx, dcancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer dcancel()
	if _, err := s.AcquireWait(dctx, leasehold.AcquireRequest{Name: "c", Owner: "w", TTL: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireWait past its deadline: %v", err)
	}
}

func TestRESPSession(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	s := rs.open(t, "")
	defer s.Close()
	ctx := respCtx(t)
	sess, err := s.OpenSession(ctx, 600*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if sess.TTL() != 600*time.Millisecond || sess.ID() == "" {
		t.Errorf("session %q, TTL %s", sess.ID(), sess.TTL())
	}
	ss := sess.Store()
	c, _ := leasehold.New(ss, leasehold.WithOwner("sessioned"))
	l, err := c.TryAcquire(ctx, "sess/a", leasehold.TTL(time.Minute), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	// A waiting acquire attaches to the session too.
	l2, err := c.Acquire(ctx, "sess/b", leasehold.TTL(time.Minute), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	// The session's keepalive holds it past several session TTLs.
	time.Sleep(2 * time.Second)
	if err := sess.Err(); err != nil {
		t.Fatalf("session lost: %v", err)
	}
	for _, l := range []*leasehold.Lease{l, l2} {
		if got, err := s.Get(ctx, l.Name()); err != nil || got.Token != l.Token() {
			t.Fatalf("session lease %s: %+v, %v", l.Name(), got, err)
		}
	}
	ss.Close() // a no-op
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if !errors.Is(sess.Err(), leasehold.ErrReleased) {
		t.Errorf("Err after Close = %v", sess.Err())
	}
	if recs, err := s.List(ctx, "sess/"); err != nil || len(recs) != 0 {
		t.Errorf("leases after the session closed: %v, %v", recs, err)
	}
	if err := sess.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := ss.TryAcquire(ctx, leasehold.AcquireRequest{Name: "sess/c", Owner: "o", TTL: time.Minute}); !errors.Is(err, remote.ErrNoSession) {
		t.Errorf("acquire in a closed session: %v", err)
	}

	// A session the server forgets is reported lost.
	lost, err := s.OpenSession(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.backend().CloseSession(ctx, lost.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a session closed on the server was not reported lost")
	}
	if !errors.Is(lost.Err(), leasehold.ErrLost) {
		t.Errorf("Err = %v, want ErrLost", lost.Err())
	}
	if err := lost.Close(ctx); !errors.Is(err, leasehold.ErrLost) {
		t.Errorf("Close of a lost session = %v", err)
	}
}

// TestRESPWatch: watches share one connection, survive a server restart
// (signalled once after it), and are closed with their context or the
// store.
func TestRESPWatch(t *testing.T) {
	rs := startRESPEngine(t, server.EngineConfig{Dir: t.TempDir()}, server.RESPOptions{})
	s := rs.open(t, "")
	defer s.Close()
	ctx := respCtx(t)
	recv := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case _, ok := <-ch:
			if !ok {
				t.Fatalf("%s: channel closed", what)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no notification within 10s", what)
		}
	}
	quiet := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
			t.Errorf("%s: unexpected notification", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	var chans []<-chan struct{}
	for i := 0; i < 3; i++ {
		ch, err := s.Watch(wctx, fmt.Sprintf("wt/%d", i%2)) // two watches of wt/0
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "wt/0", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	quiet("after a grant", chans[0])
	if err := s.Release(ctx, "wt/0", "o", rec.Token); err != nil {
		t.Fatal(err)
	}
	recv("first watch of wt/0", chans[0])
	recv("second watch of wt/0", chans[2])
	quiet("watch of wt/1", chans[1])

	rs.restart()
	for i, ch := range chans {
		recv(fmt.Sprintf("watch %d after a restart", i), ch)
	}
	rec, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "wt/1", Owner: "o", TTL: time.Minute})
	if err == nil {
		err = s.Release(ctx, "wt/1", "o", rec.Token)
	}
	if err != nil {
		t.Fatal(err)
	}
	recv("watch of wt/1 after the restart", chans[1])

	cancel()
	for i, ch := range chans {
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-deadline:
				t.Fatalf("watch %d not closed after its context ended", i)
			}
		}
	}
	ch, err := s.Watch(ctx, "wt/2")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("a value instead of close after the store closed")
		}
	case <-time.After(10 * time.Second):
		t.Error("watch not closed with the store")
	}
	if _, err := s.Watch(ctx, "wt/3"); !errors.Is(err, leasehold.ErrClosed) {
		t.Errorf("Watch after Close: %v", err)
	}
}

// TestRESPTLS: leaseholds:// with a private CA and a client certificate.
func TestRESPTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := respMakeCert(t, nil, nil, "test CA")
	srvCert, srvKey := respMakeCert(t, ca, caKey, "127.0.0.1")
	cliCert, cliKey := respMakeCert(t, ca, caKey, "client")
	write := func(name string, blocks ...*pem.Block) string {
		var b []byte
		for _, bl := range blocks {
			b = append(b, pem.EncodeToMemory(bl)...)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyBlock := func(k *ecdsa.PrivateKey) *pem.Block {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	caFile := write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	cliFile := write("client.pem", &pem.Block{Type: "CERTIFICATE", Bytes: cliCert.Raw})
	cliKeyFile := write("client.key", keyBlock(cliKey))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	tc := &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.Raw}, PrivateKey: srvKey}},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{TLS: tc})
	addr := strings.TrimPrefix(rs.url(""), "leasehold://")
	s, err := remote.OpenRESP("leaseholds://" + addr + "?ca=" + caFile + "&cert=" + cliFile + "&key=" + cliKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := respCtx(t)
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "tls/x", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"leaseholds://" + addr + "?ca=" + caFile,                           // no client certificate
		"leaseholds://" + addr + "?cert=" + cliFile + "&key=" + cliKeyFile, // unknown authority
		"leasehold://" + addr,                                              // plain text
		"leaseholds://" + addr + "?ca=" + caFile + "&cert=" + cliFile + "&key=" + cliKeyFile + "&server_name=other", // wrong name
	} {
		if s, err := remote.OpenRESP(bad); err == nil {
			_, err = s.Get(ctx, "tls/x")
			s.Close()
			if err == nil {
				t.Errorf("OpenRESP(%s) worked", bad)
			}
		}
	}
}

func respMakeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
	}
	if parent == nil {
		tmpl.IsCA = true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		parent, parentKey = tmpl, key
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// BenchmarkRESPPairs: 32 goroutines (on 2 cores) each acquire and release
// distinct names through one RESPStore (pipelined over its shared
// connections) against an in-process server on the engine, durable (every
// grant group-committed with fdatasync) and NoSync.
func BenchmarkRESPPairs(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noSync bool
	}{{"durable", false}, {"nosync", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var syncs, records atomic.Int64
			hooks := server.Hooks{Sync: func(_ time.Duration, n int) { syncs.Add(1); records.Add(int64(n)) }}
			rs := startRESPEngine(b, server.EngineConfig{Dir: b.TempDir(), NoSync: bc.noSync, Hooks: hooks}, server.RESPOptions{})
			s := rs.open(b, "")
			defer s.Close()
			ctx := context.Background()
			var next atomic.Int64
			b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				name := fmt.Sprintf("bench/%d", next.Add(1))
				for pb.Next() {
					rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "bench", TTL: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					if err := s.Release(ctx, name, "bench", rec.Token); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
			if n := syncs.Load(); n > 0 {
				b.ReportMetric(float64(records.Load())/float64(n), "records/sync")
			}
		})
	}
}
