package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
)

// cutProxy forwards TCP connections to upstream until Cut; from then on it
// is a blackhole: whatever either side sends is dropped, nothing is
// answered, and connections (old and new) stay open.
type cutProxy struct {
	ln  net.Listener
	up  string
	cut atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, upstream string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, up: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// Cut turns the proxy into a blackhole.
func (p *cutProxy) Cut() { p.cut.Store(true) }

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.cut.Load() {
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
			continue
		}
		u, err := net.Dial("tcp", p.up)
		if err != nil {
			c.Close()
			continue
		}
		p.track(u)
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

// pipe copies src to dst until either fails, dropping everything once cut.
func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.cut.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// closeQuickly closes a session whose server may be unreachable.
func closeQuickly(close func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = close(ctx)
}

// sessionOpener opens a session on a store and returns the session (as a
// leasehold.Bound), the store that attaches acquires to it, and its Close.
type sessionOpener func(ctx context.Context, url string, ttl time.Duration, k clock.Clock) (leasehold.Bound, leasehold.Store, func(), error)

func openHTTPSession(ctx context.Context, url string, ttl time.Duration, k clock.Clock) (leasehold.Bound, leasehold.Store, func(), error) {
	s, err := remote.OpenHTTP(url + "?timeout=5s")
	if err != nil {
		return nil, nil, nil, err
	}
	sess, err := s.OpenSession(ctx, ttl, remote.SessionClock(k))
	if err != nil {
		s.Close()
		return nil, nil, nil, err
	}
	return sess, sess.Store(), func() { closeQuickly(sess.Close); s.Close() }, nil
}

func openRESPSession(ctx context.Context, url string, ttl time.Duration, k clock.Clock) (leasehold.Bound, leasehold.Store, func(), error) {
	s, err := remote.OpenRESP(url + "?timeout=5s")
	if err != nil {
		return nil, nil, nil, err
	}
	sess, err := s.OpenSession(ctx, ttl, remote.SessionClock(k))
	if err != nil {
		s.Close()
		return nil, nil, nil, err
	}
	return sess, sess.Store(), func() { closeQuickly(sess.Close); s.Close() }, nil
}

// TestSessionLeaseLostBeforeRegrant is the scenario of issue 13: a client
// holds a 10 s lease through a 600 ms session; the network between it and
// the server is cut; another client, not behind the cut, takes the lease
// (token 2) once the server has ended the session. The first lease must
// have been reported lost (Held false, Done closed with ErrLost) before the
// call that was granted it. The server and the first client share a fake
// clock, moved in 10 ms steps, so the order is decided by the deadlines
// alone; at each step the first lease is checked before the other client
// tries. Run over HTTP and RESP, against the engine and a proxy in front
// of another store (leasehold serve --store).
func TestSessionLeaseLostBeforeRegrant(t *testing.T) {
	type serverKind struct {
		name  string
		start func(t *testing.T, fc *clock.Fake) (addr, scheme string)
	}
	engine := func(fc *clock.Fake) server.Backend {
		eng, err := server.OpenEngine(server.EngineConfig{Clock: fc})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	}
	proxy := func(fc *clock.Fake) server.Backend {
		return server.NewProxy(memory.New(memory.WithClock(fc)), server.ProxyConfig{Clock: fc})
	}
	httpOn := func(mk func(*clock.Fake) server.Backend) func(*testing.T, *clock.Fake) (string, string) {
		return func(t *testing.T, fc *clock.Fake) (string, string) {
			b := mk(fc)
			srv := httptest.NewServer(server.NewHandler(b, server.HandlerOptions{}))
			t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); b.Close() })
			return strings.TrimPrefix(srv.URL, "http://"), "http://"
		}
	}
	respOn := func(mk func(*clock.Fake) server.Backend) func(*testing.T, *clock.Fake) (string, string) {
		return func(t *testing.T, fc *clock.Fake) (string, string) {
			rs := startRESPBackend(t, mk(fc), server.RESPOptions{})
			return strings.TrimPrefix(rs.url(""), "leasehold://"), "leasehold://"
		}
	}
	cases := []struct {
		name  string
		start func(*testing.T, *clock.Fake) (string, string)
		open  sessionOpener
	}{
		{"http/engine", httpOn(engine), openHTTPSession},
		{"resp/engine", respOn(engine), openRESPSession},
		{"http/proxy", httpOn(proxy), openHTTPSession},
		{"resp/proxy", respOn(proxy), openRESPSession},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fc := clock.NewFake(time.Unix(1_000_000, 0))
			addr, scheme := tc.start(t, fc)
			cut := startCutProxy(t, addr)
			ctx := ctxT(t)

			sess, ss, closeSess, err := tc.open(ctx, scheme+cut.addr(), 600*time.Millisecond, fc)
			if err != nil {
				t.Fatal(err)
			}
			defer closeSess()
			a, err := leasehold.New(ss, leasehold.WithOwner("a"), leasehold.WithClock(fc))
			if err != nil {
				t.Fatal(err)
			}
			la, err := a.TryAcquire(ctx, "scenario", leasehold.TTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := sess.Deadline(); !la.Deadline().Equal(d) {
				t.Errorf("Deadline %s, want the session's %s (earlier than the lease's own)", la.Deadline(), d)
			}
			other, err := remote.Open(ctx, scheme+addr)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			b, err := leasehold.New(other, leasehold.WithOwner("b"))
			if err != nil {
				t.Fatal(err)
			}

			cut.Cut()
			start := fc.Now()
			var lostAt time.Time
			for step := 0; ; step++ {
				if step > 300 { // 3 s of fake time: five session TTLs
					t.Fatalf("the other client was not granted the lease within 3s of fake time (first lease held: %v)", la.Held())
				}
				if lostAt.IsZero() && !la.Held() {
					lostAt = fc.Now()
				}
				callAt := fc.Now()
				lb, err := b.TryAcquire(ctx, "scenario", leasehold.TTL(10*time.Second), leasehold.NoKeepalive())
				if err == nil {
					if lostAt.IsZero() || !lostAt.Before(callAt) {
						t.Fatalf("token %d was granted to the other client by a call at +%s while the first lease (token %d) was still held (lost at %v; its deadline +%s)",
							lb.Token(), callAt.Sub(start), la.Token(), lostAt, la.Deadline().Sub(start))
					}
					if lb.Token() <= la.Token() {
						t.Errorf("second grant's token %d not above the first's %d", lb.Token(), la.Token())
					}
					t.Logf("first lease lost at +%s, second grant (token %d) called at +%s", lostAt.Sub(start), lb.Token(), callAt.Sub(start))
					break
				}
				if !errors.Is(err, leasehold.ErrHeld) {
					t.Fatalf("other client's TryAcquire: %v", err)
				}
				fc.Advance(10 * time.Millisecond)
			}
			select {
			case <-la.Done():
			default:
				t.Fatal("Held is false but Done is not closed")
			}
			if !errors.Is(la.Err(), leasehold.ErrLost) {
				t.Errorf("first lease's Err = %v, want ErrLost", la.Err())
			}
		})
	}
}

// When the server forgets a session, or the client closes it, every lease
// taken through it is lost at once (long before its own deadline, and
// before the session's), over HTTP and RESP.
func TestSessionEndLosesItsLeases(t *testing.T) {
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); eng.Close() })
	rs := startRESPBackend(t, eng, server.RESPOptions{})
	type session interface {
		leasehold.Bound
		ID() string
		Close(context.Context) error
	}
	opens := map[string]func(ctx context.Context, ttl time.Duration) (session, leasehold.Store){
		"http": func(ctx context.Context, ttl time.Duration) (session, leasehold.Store) {
			s, err := remote.OpenHTTP(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			sess, err := s.OpenSession(ctx, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return sess, sess.Store()
		},
		"resp": func(ctx context.Context, ttl time.Duration) (session, leasehold.Store) {
			s := rs.open(t, "")
			t.Cleanup(func() { s.Close() })
			sess, err := s.OpenSession(ctx, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return sess, sess.Store()
		},
	}
	for proto, open := range opens {
		t.Run(proto, func(t *testing.T) {
			ctx := ctxT(t)
			// Forgotten by the server: the next keepalive (within TTL/3)
			// is refused.
			sess, ss := open(ctx, 3*time.Second)
			c, _ := leasehold.New(ss, leasehold.WithOwner("a"))
			l1, err := c.TryAcquire(ctx, proto+"/forgotten/1", leasehold.TTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			l2, err := c.Acquire(ctx, proto+"/forgotten/2", leasehold.TTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if err := eng.CloseSession(ctx, sess.ID()); err != nil {
				t.Fatal(err)
			}
			for _, l := range []*leasehold.Lease{l1, l2} {
				select {
				case <-l.Done():
				case <-time.After(25 * time.Second): // the keepalive comes within 1 s
					t.Fatalf("%s: not lost after its session was forgotten by the server", l.Name())
				}
				if l.Held() || !errors.Is(l.Err(), leasehold.ErrLost) || !errors.Is(l.Err(), remote.ErrNoSession) {
					t.Fatalf("%s: Held %v, Err %v; want lost with ErrNoSession", l.Name(), l.Held(), l.Err())
				}
			}

			// Closed by the client.
			sess, ss = open(ctx, 30*time.Second)
			c, _ = leasehold.New(ss, leasehold.WithOwner("a"))
			l3, err := c.TryAcquire(ctx, proto+"/closed", leasehold.TTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if err := sess.Close(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-l3.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("lease not lost when its session was closed")
			}
			if l3.Held() || !errors.Is(l3.Err(), leasehold.ErrLost) {
				t.Fatalf("Held %v, Err %v after Close", l3.Held(), l3.Err())
			}
			if !errors.Is(sess.Err(), leasehold.ErrReleased) {
				t.Fatalf("session Err after Close = %v, want ErrReleased", sess.Err())
			}
		})
	}
}

// A bad session option is refused with an invalid error and opens nothing
// on the server.
func TestSessionBadOptions(t *testing.T) {
	eng, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.NewHandler(eng, server.HandlerOptions{}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); eng.Close() })
	rs := startRESPBackend(t, eng, server.RESPOptions{})
	hs, err := remote.OpenHTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close()
	rsStore := rs.open(t, "")
	defer rsStore.Close()
	ctx := ctxT(t)
	for _, opt := range []remote.SessionOption{remote.SessionClock(nil), remote.SessionDrift(0.6, 0), remote.SessionDrift(0, 2*time.Minute)} {
		if _, err := hs.OpenSession(ctx, time.Second, opt); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("HTTP OpenSession with a bad option: %v", err)
		}
		if _, err := rsStore.OpenSession(ctx, time.Second, opt); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("RESP OpenSession with a bad option: %v", err)
		}
	}
	if n := eng.Stats().Sessions; n != 0 {
		t.Fatalf("%d sessions opened by refused calls", n)
	}
}

// Closing the store a session was opened on stops its keepalive: the
// session, and every lease taken through it, is lost at once rather than
// at the session's deadline (a minute away here), over HTTP and RESP.
func TestSessionStoreClosedLosesLeases(t *testing.T) {
	es := startEngine(t, server.HandlerOptions{})
	rs := startRESPEngine(t, server.EngineConfig{}, server.RESPOptions{})
	ctx := ctxT(t)
	for _, proto := range []string{"http", "resp"} {
		var sess leasehold.Bound
		var ss leasehold.Store
		var closeStore func()
		if proto == "http" {
			s := es.open(t, "")
			x, err := s.OpenSession(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			sess, ss, closeStore = x, x.Store(), func() { s.Close() }
		} else {
			s := rs.open(t, "")
			x, err := s.OpenSession(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			sess, ss, closeStore = x, x.Store(), func() { s.Close() }
		}
		c, _ := leasehold.New(ss, leasehold.WithOwner("a"))
		l, err := c.TryAcquire(ctx, "closed-store/"+proto, leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		closeStore()
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: lease not lost when its session's store was closed", proto)
		}
		if !errors.Is(l.Err(), leasehold.ErrLost) || !errors.Is(sess.Err(), leasehold.ErrLost) {
			t.Fatalf("%s: lease Err %v, session Err %v; want ErrLost", proto, l.Err(), sess.Err())
		}
	}
}
