package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
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
	backends := []struct {
		name string
		mk   func(t *testing.T, fc *clock.Fake) server.Backend
	}{
		{"engine", func(t *testing.T, fc *clock.Fake) server.Backend {
			eng, err := server.OpenEngine(server.EngineConfig{Clock: fc})
			if err != nil {
				t.Fatal(err)
			}
			return eng
		}},
		{"proxy", func(t *testing.T, fc *clock.Fake) server.Backend {
			return server.NewProxy(memory.New(memory.WithClock(fc)), server.ProxyConfig{Clock: fc})
		}},
	}
	for _, bk := range backends {
		for _, tr := range transports {
			t.Run(tr.name+"/"+bk.name, func(t *testing.T) {
				fc := clock.NewFake(time.Unix(1_000_000, 0))
				ts := startBackend(t, tr, bk.mk(t, fc), serveOptions{})
				cut := startCutProxy(t, ts.hostPort())
				ctx := ctxT(t)

				s, err := tr.open(tr.scheme + cut.addr() + "?timeout=5s")
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				sess, err := tr.openSession(ctx, s, 600*time.Millisecond, remote.SessionClock(fc))
				if err != nil {
					t.Fatal(err)
				}
				defer closeQuickly(sess.Close)
				a, err := leasehold.New(sess.Store(), leasehold.WithOwner("a"), leasehold.WithClock(fc))
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
				other, err := remote.Open(ctx, ts.url(""))
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
				ended(t, "the first lease, no longer held,", la, 0, leasehold.ErrLost)
			})
		}
	}
}

// When the server forgets a session, or the client closes it, every lease
// taken through it is lost at once (long before its own deadline, and
// before the session's), over HTTP and RESP.
func TestSessionEndLosesItsLeases(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		ctx := ctxT(t)
		s := ts.open(t, "")
		// Forgotten by the server: the next keepalive (within TTL/3) is
		// refused.
		sess := ts.openSession(t, ctx, s, 3*time.Second)
		c, _ := leasehold.New(sess.Store(), leasehold.WithOwner("a"))
		l1, err := c.TryAcquire(ctx, "forgotten/1", leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		l2, err := c.Acquire(ctx, "forgotten/2", leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := ts.backend().CloseSession(ctx, sess.ID()); err != nil {
			t.Fatal(err)
		}
		for _, l := range []*leasehold.Lease{l1, l2} {
			// The keepalive comes within 1 s.
			ended(t, l.Name()+" after the server forgot its session", l, 25*time.Second, leasehold.ErrLost, remote.ErrNoSession)
			if l.Held() {
				t.Fatalf("%s: held after its session was forgotten", l.Name())
			}
		}

		// Closed by the client.
		sess = ts.openSession(t, ctx, s, 30*time.Second)
		c, _ = leasehold.New(sess.Store(), leasehold.WithOwner("a"))
		l3, err := c.TryAcquire(ctx, "closed", leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if err := sess.Close(ctx); err != nil {
			t.Fatal(err)
		}
		ended(t, "a lease of the closed session", l3, 10*time.Second, leasehold.ErrLost)
		if l3.Held() {
			t.Fatal("held after its session was closed")
		}
		ended(t, "the closed session", sess, 0, leasehold.ErrReleased)
	})
}

// A bad session option is refused with an invalid error and opens nothing
// on the server.
func TestSessionBadOptions(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, "")
		ctx := ctxT(t)
		for _, opt := range []remote.SessionOption{remote.SessionClock(nil), remote.SessionDrift(0.6, 0), remote.SessionDrift(0, 2*time.Minute)} {
			if _, err := tr.openSession(ctx, s, time.Second, opt); !errors.Is(err, leasehold.ErrInvalid) {
				t.Errorf("OpenSession with a bad option: %v", err)
			}
		}
		if n := ts.backend().(*server.Engine).Stats().Sessions; n != 0 {
			t.Fatalf("%d sessions opened by refused calls", n)
		}
	})
}

// Closing the store a session was opened on stops its keepalive: the
// session, and every lease taken through it, is lost at once rather than
// at the session's deadline (a minute away here), over HTTP and RESP.
func TestSessionStoreClosedLosesLeases(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		ctx := ctxT(t)
		s := ts.open(t, "")
		sess := ts.openSession(t, ctx, s, time.Minute)
		c, _ := leasehold.New(sess.Store(), leasehold.WithOwner("a"))
		l, err := c.TryAcquire(ctx, "closed-store", leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		ended(t, "a lease of the session whose store was closed", l, 10*time.Second, leasehold.ErrLost)
		ended(t, "the session whose store was closed", sess, 0, leasehold.ErrLost)
	})
}

// TestSessionCloseLosesLeasesFirst: when Close makes the server free a
// session's lease, the client's lease no longer counts as held — checked at
// the moment the server emits the release, on both transports.
func TestSessionCloseLosesLeasesFirst(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		var lp atomic.Pointer[leasehold.Lease]
		var seen atomic.Int32 // 1: held when freed, 2: not held
		ts := startEngine(t, tr, server.EngineConfig{Hooks: server.Hooks{Event: func(ev server.Event) {
			if ev.Type != server.EventReleased {
				return
			}
			if l := lp.Load(); l != nil && l.Name() == ev.Name {
				if l.Held() {
					seen.Store(1)
				} else {
					seen.Store(2)
				}
			}
		}}}, serveOptions{})
		ctx := ctxT(t)
		s := ts.open(t, "")
		sess := ts.openSession(t, ctx, s, 3*time.Second)
		c, err := leasehold.New(sess.Store(), leasehold.WithOwner("a"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "close", leasehold.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		lp.Store(l)
		if err := sess.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		switch seen.Load() {
		case 0:
			t.Errorf("the server did not free the lease on Close")
		case 1:
			t.Errorf("the lease still counted as held when the server freed it")
		}
		if l.Held() {
			t.Errorf("lease held after its session was closed")
		}
	})
}
