package server

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// Sessions of a Proxy end on time on the server side too: a lease whose
// session has expired or is being closed is neither renewed nor granted.

// pxOpenSession opens a session of ttl on p.
func pxOpenSession(t *testing.T, p *Proxy, ttl time.Duration) Session {
	t.Helper()
	sess, err := p.OpenSession(context.Background(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// pxAcquireIn acquires name for owner "o" with ttl in the session id.
func pxAcquireIn(t *testing.T, p *Proxy, id, name string, ttl time.Duration) leasehold.Record {
	t.Helper()
	req := pxReq(name, "o", ttl)
	req.Session = id
	return pxAcquire(t, p, req)
}

// pxGate is a gate a test store blocks on: started is closed when the
// first call reaches it, and the call goes on once open is called (which
// may be called any number of times).
type pxGate struct {
	started chan struct{}
	gate    chan struct{}
	once    sync.Once
	open    func()
}

func newPxGate() *pxGate {
	g := &pxGate{started: make(chan struct{}), gate: make(chan struct{})}
	g.open = pxOnceClose(g.gate)
	return g
}

func (g *pxGate) pass() {
	g.once.Do(func() { close(g.started) })
	<-g.gate
}

func pxOnceClose(ch chan struct{}) func() {
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// pxGatedRenew blocks every Renew of one name at its gate (its context
// notwithstanding).
type pxGatedRenew struct {
	leasehold.Store
	name string
	*pxGate
}

func newPxGatedRenew(store leasehold.Store, name string) *pxGatedRenew {
	return &pxGatedRenew{Store: store, name: name, pxGate: newPxGate()}
}

func (s *pxGatedRenew) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if name == s.name {
		s.pass()
	}
	return s.Store.Renew(ctx, name, owner, token, ttl)
}

// pxGatedSession is a proxy (on a fake clock) whose store blocks the
// renewals of the lease "slow", and a session of 1s on it.
type pxGatedSession struct {
	fc   *clock.Fake
	p    *Proxy
	gs   *pxGatedRenew
	sess Session
}

// newPxGatedSession makes one; wrap, if set, wraps the gated store.
func newPxGatedSession(t *testing.T, wrap func(*pxGatedRenew) leasehold.Store) *pxGatedSession {
	var gs *pxGatedRenew
	fc, p := pxFake(t, func(s leasehold.Store) leasehold.Store {
		gs = newPxGatedRenew(s, "slow")
		if wrap != nil {
			return wrap(gs)
		}
		return gs
	})
	t.Cleanup(gs.open) // before Close (an earlier cleanup) waits for the session loop
	return &pxGatedSession{fc: fc, p: p, gs: gs, sess: pxOpenSession(t, p, time.Second)}
}

// holdLoop acquires "slow" in the session and waits until the session
// loop's renewal of it hangs at the gate: the loop is held up.
func (g *pxGatedSession) holdLoop(t *testing.T) {
	pxAcquireIn(t, g.p, g.sess.ID, "slow", 300*time.Millisecond)
	g.fc.WaitForTimers(1)
	g.fc.Advance(100 * time.Millisecond) // "slow" is due: the loop renews it and hangs
	<-g.gs.started
}

// A lease whose session has expired is no longer held: a Renew that comes
// before the proxy has released it must be refused (as the Engine refuses
// it), not confirmed and then freed under the holder. Here the session loop
// is held up by a slow renewal of another lease of the session while the
// session expires.
func TestProxyRenewAfterSessionExpiryRefused(t *testing.T) {
	g := newPxGatedSession(t, nil)
	ctx := context.Background()
	rec := pxAcquireIn(t, g.p, g.sess.ID, "held", time.Hour)
	g.holdLoop(t)
	g.fc.Advance(time.Second) // the session expires meanwhile
	if err := g.p.Renew(ctx, "held", "o", rec.Token, time.Hour); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("Renew of a lease whose session expired = %v, want ErrNotHeld", err)
	}
	if _, err := g.p.KeepAlive(ctx, g.sess.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("KeepAlive of the expired session = %v", err)
	}
	// Once the loop goes on, it ends the session and frees its leases.
	g.gs.open()
	servertest.WaitFor(t, "the expired session's leases released", func() bool {
		_, err := g.p.Get(ctx, "held")
		return errors.Is(err, leasehold.ErrNotFound)
	})
}

// The session expires while the holder's own Renew is at the store. The
// proxy frees the lease once the renewal is back, so the renewal must be
// refused, not confirmed.
func TestProxyRenewSpanningSessionExpiry(t *testing.T) {
	var gs *pxGatedRenew
	fc, p := pxFake(t, func(s leasehold.Store) leasehold.Store { gs = newPxGatedRenew(s, "held"); return gs })
	t.Cleanup(gs.open)
	ctx := context.Background()
	sess := pxOpenSession(t, p, time.Second)
	rec := pxAcquireIn(t, p, sess.ID, "held", time.Hour)
	res := make(chan error, 1)
	go func() { res <- p.Renew(ctx, "held", "o", rec.Token, 5*time.Second) }()
	<-gs.started
	fc.Advance(2 * time.Second) // past the 1 s session while the Renew is at the store
	gs.open()
	if err := <-res; !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("a Renew that spanned its session's expiry returned %v, want ErrNotHeld", err)
	}
	servertest.WaitFor(t, "the lease released", func() bool { _, err := p.Get(ctx, "held"); return err != nil })
}

// pxGatedAcquire blocks a TryAcquire of one name at its gate.
type pxGatedAcquire struct {
	leasehold.Store
	name string
	*pxGate
}

func (s *pxGatedAcquire) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if req.Name == s.name {
		s.pass()
	}
	return s.Store.TryAcquire(ctx, req)
}

// A grant made on the store while its session expired is not handed out:
// the proxy releases it and answers no-session, as the Engine, which checks
// the session and grants in one step, would have. The session loop is held
// up (as above) so that the session has expired but not yet been ended.
func TestProxyAcquireRacingSessionExpiry(t *testing.T) {
	ga := &pxGatedAcquire{name: "late", pxGate: newPxGate()}
	g := newPxGatedSession(t, func(gs *pxGatedRenew) leasehold.Store { ga.Store = gs; return ga })
	t.Cleanup(ga.open)
	ctx := context.Background()
	g.holdLoop(t)

	late := pxReq("late", "o", time.Hour)
	late.Session = g.sess.ID
	errc := acquireAsync(ctx, g.p, late)
	<-ga.started              // the acquire checked the session (alive) and is on the store
	g.fc.Advance(time.Second) // the session expires meanwhile
	ga.open()                 // the store grants "late"
	if err := <-errc; !errors.Is(err, ErrNoSession) {
		t.Fatalf("Acquire granted while its session expired = %v, want ErrNoSession", err)
	}
	if _, err := g.p.Get(ctx, "late"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("the grant made as the session expired is still held: %v", err)
	}
}

// pxGatedRelease blocks the first Release until gate is closed, and sends
// the name it is releasing on started.
type pxGatedRelease struct {
	leasehold.Store
	once    sync.Once
	started chan string
	gate    chan struct{}
}

func (s *pxGatedRelease) Release(ctx context.Context, name, owner string, token uint64) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		s.started <- name
		<-s.gate
	}
	return s.Store.Release(ctx, name, owner, token)
}

// While a closing session's leases are being released one by one, a Renew
// of one not yet released must be refused: it is about to be freed.
func TestProxyRenewDuringSessionCloseRefused(t *testing.T) {
	gs := &pxGatedRelease{Store: memory.New(), started: make(chan string, 1), gate: make(chan struct{})}
	p := pxNew(t, gs, ProxyConfig{})
	openGate := pxOnceClose(gs.gate)
	defer openGate()
	ctx := context.Background()
	sess := pxOpenSession(t, p, time.Minute)
	tokens := map[string]uint64{}
	for _, name := range []string{"a", "b"} {
		tokens[name] = pxAcquireIn(t, p, sess.ID, name, time.Hour).Token
	}
	errc := make(chan error, 1)
	go func() { errc <- p.CloseSession(ctx, sess.ID) }()
	first := <-gs.started
	other := map[string]string{"a": "b", "b": "a"}[first]
	if err := p.Renew(ctx, other, "o", tokens[other], time.Hour); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("Renew of %s while its session closes = %v, want ErrNotHeld", other, err)
	}
	openGate()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := p.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("%s after CloseSession: %v", name, err)
		}
	}
}

// pxStep advances the fake clock and waits until the session loop has done
// what became due (it has armed its next timer, or the session ended).
func pxStep(t *testing.T, fc *clock.Fake, p *Proxy, d time.Duration) {
	t.Helper()
	fc.Advance(d)
	servertest.WaitFor(t, "session loop idle", func() bool { return fc.Timers() >= 1 || p.Stats().Sessions == 0 })
}

func TestProxySessionKeepsLeases(t *testing.T) {
	fc, p := pxFake(t, nil)
	ctx := context.Background()
	sess := pxOpenSession(t, p, time.Second)
	fc.WaitForTimers(1)

	a := pxAcquireIn(t, p, sess.ID, "s/short", 300*time.Millisecond)
	b := pxAcquireIn(t, p, sess.ID, "s/default", 0) // TTL 0: the session's TTL
	if b.TTL != time.Second {
		t.Fatalf("lease with TTL 0 in a session has TTL %s, want the session's 1s", b.TTL)
	}
	other := pxAcquire(t, p, pxReq("s/plain", "o", 300*time.Millisecond))

	// 3s: ten times the short lease's TTL, three times the session's.
	for range 60 {
		pxStep(t, fc, p, 50*time.Millisecond)
		s, err := p.KeepAlive(ctx, sess.ID)
		if err != nil {
			t.Fatalf("KeepAlive: %v", err)
		}
		if s.Leases != 2 {
			t.Fatalf("at %s: session has %d leases, want 2", fc.Now(), s.Leases)
		}
	}
	for _, want := range []leasehold.Record{a, b} {
		rec, err := p.Get(ctx, want.Name)
		if err != nil || rec.Owner != "o" || rec.Token != want.Token {
			t.Fatalf("Get(%s) = %+v, %v; want token %d still held", want.Name, rec, err, want.Token)
		}
	}
	if _, err := p.Get(ctx, other.Name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("a lease outside the session outlived its TTL: %v", err)
	}

	if err := p.CloseSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a.Name, b.Name} {
		if rec, err := p.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("Get(%s) after CloseSession = %+v, %v", name, rec, err)
		}
	}
	if _, err := p.KeepAlive(ctx, sess.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("KeepAlive after close: %v", err)
	}
	if err := p.CloseSession(ctx, sess.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("CloseSession twice: %v", err)
	}
	if st := p.Stats(); st.Sessions != 0 {
		t.Fatalf("Stats.Sessions = %d", st.Sessions)
	}
}

func TestProxySessionExpires(t *testing.T) {
	fc, p := pxFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := p.Subscribe(ctx, "e/")
	sess := pxOpenSession(t, p, time.Second)
	fc.WaitForTimers(1)
	// A lease TTL longer than the session's: only the proxy's release can
	// free it when the session expires.
	rec := pxAcquireIn(t, p, sess.ID, "e/lease", time.Hour)
	if st := p.Stats(); st.Sessions != 1 {
		t.Fatalf("Stats.Sessions = %d", st.Sessions)
	}

	for range 10 {
		pxStep(t, fc, p, 50*time.Millisecond)
		if _, err := p.KeepAlive(ctx, sess.ID); err != nil {
			t.Fatal(err)
		}
	}
	for range 30 { // 1.5s without KeepAlive
		pxStep(t, fc, p, 50*time.Millisecond)
	}
	ev := pxNextOf(t, events, EventExpired, EventReleased)
	if ev.Type != EventExpired || ev.Name != rec.Name || ev.Token != rec.Token {
		t.Fatalf("event %+v, want expired for token %d", ev, rec.Token)
	}
	if got, err := p.Get(ctx, rec.Name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("Get after session expiry = %+v, %v", got, err)
	}
	if _, err := p.KeepAlive(ctx, sess.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("KeepAlive after expiry: %v", err)
	}
	req := pxReq("e/lease", "o", time.Hour)
	req.Session = sess.ID
	if _, err := p.Acquire(ctx, req); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Acquire in expired session: %v", err)
	}
	if st := p.Stats(); st.Sessions != 0 {
		t.Fatalf("Stats.Sessions = %d", st.Sessions)
	}
}

func TestProxyWaiterLeavesWithSession(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	ctx := context.Background()
	pxAcquire(t, p, pxReq("job", "holder", time.Minute))
	sess := pxOpenSession(t, p, time.Minute)
	req := pxReq("job", "w", 0)
	req.Session, req.Wait = sess.ID, time.Hour
	errc := acquireAsync(ctx, p, req)
	servertest.WaitFor(t, "w queued", func() bool { return len(p.Waiters("job")) == 1 })
	if ws := p.Waiters("job"); ws[0].Session != sess.ID {
		t.Fatalf("waiter's session %q", ws[0].Session)
	}
	if err := p.CloseSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrNoSession) {
		t.Fatalf("waiter after its session closed: %v", err)
	}
	servertest.WaitFor(t, "queue empty", func() bool { return len(p.Waiters("job")) == 0 })
}

// A holder's Renew of a session lease keeps the session alive and sets the
// TTL the proxy renews the lease with.
func TestProxyRenewSessionLease(t *testing.T) {
	fc, p := pxFake(t, nil)
	ctx := context.Background()
	sess := pxOpenSession(t, p, time.Second)
	rec := pxAcquireIn(t, p, sess.ID, "r", 300*time.Millisecond)
	for range 10 {
		pxStep(t, fc, p, 50*time.Millisecond)
	}
	if err := p.Renew(ctx, "r", "o", rec.Token, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for range 14 { // 1.2s since the last KeepAlive (there was none)
		pxStep(t, fc, p, 50*time.Millisecond)
	}
	if _, err := p.KeepAlive(ctx, sess.ID); err != nil {
		t.Fatalf("session ended although its lease was renewed 0.7s ago: %v", err)
	}
	got, err := p.Get(ctx, "r")
	if err != nil || got.Token != rec.Token || got.TTL != 600*time.Millisecond {
		t.Fatalf("Get = %+v, %v; want token %d renewed with 600ms", got, err, rec.Token)
	}
}
