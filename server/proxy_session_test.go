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
)

// Sessions of a Proxy end on time on the server side too: a lease whose
// session has expired or is being closed is neither renewed nor granted.

// pxGatedRenew blocks every Renew of one name until gate is closed (its
// context notwithstanding), and says when one has started.
type pxGatedRenew struct {
	leasehold.Store
	name    string
	started chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func (s *pxGatedRenew) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if name == s.name {
		s.once.Do(func() { close(s.started) })
		<-s.gate
	}
	return s.Store.Renew(ctx, name, owner, token, ttl)
}

// A lease whose session has expired is no longer held: a Renew that comes
// before the proxy has released it must be refused (as the Engine refuses
// it), not confirmed and then freed under the holder. Here the session loop
// is held up by a slow renewal of another lease of the session while the
// session expires.
func TestProxyRenewAfterSessionExpiryRefused(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	gs := &pxGatedRenew{Store: memory.New(memory.WithClock(fc)), name: "slow", started: make(chan struct{}), gate: make(chan struct{})}
	p := pxNew(t, gs, ProxyConfig{Clock: fc})
	var openGate sync.Once
	defer openGate.Do(func() { close(gs.gate) }) // before Close (cleanup) waits for the session loop
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slow := pxReq("slow", "o", 300*time.Millisecond)
	slow.Session = sess.ID
	pxAcquire(t, p, slow)
	held := pxReq("held", "o", time.Hour)
	held.Session = sess.ID
	rec := pxAcquire(t, p, held)

	fc.WaitForTimers(1)
	fc.Advance(100 * time.Millisecond) // "slow" is due: the loop renews it and hangs
	<-gs.started
	fc.Advance(time.Second) // the session expires meanwhile
	err = p.Renew(ctx, "held", "o", rec.Token, time.Hour)
	if !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("Renew of a lease whose session expired = %v, want ErrNotHeld", err)
	}
	if _, err := p.KeepAlive(ctx, sess.ID); !errors.Is(err, ErrNoSession) {
		t.Fatalf("KeepAlive of the expired session = %v", err)
	}
	// Once the loop goes on, it ends the session and frees its leases.
	openGate.Do(func() { close(gs.gate) })
	pxWaitUntil(t, "the expired session's leases released", func() bool {
		_, err := p.Get(ctx, "held")
		return errors.Is(err, leasehold.ErrNotFound)
	})
}

// pxGatedAcquire blocks a TryAcquire of one name until gate is closed, and
// says when it has started.
type pxGatedAcquire struct {
	*pxGatedRenew
	name    string
	started chan struct{}
	gate    chan struct{}
}

func (s *pxGatedAcquire) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if req.Name == s.name {
		close(s.started)
		<-s.gate
	}
	return s.pxGatedRenew.TryAcquire(ctx, req)
}

// A grant made on the store while its session expired is not handed out:
// the proxy releases it and answers no-session, as the Engine, which checks
// the session and grants in one step, would have. The session loop is held
// up (as above) so that the session has expired but not yet been ended.
func TestProxyAcquireRacingSessionExpiry(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	gr := &pxGatedRenew{Store: memory.New(memory.WithClock(fc)), name: "slow", started: make(chan struct{}), gate: make(chan struct{})}
	ga := &pxGatedAcquire{pxGatedRenew: gr, name: "late", started: make(chan struct{}), gate: make(chan struct{})}
	p := pxNew(t, ga, ProxyConfig{Clock: fc})
	openRenew, openAcquire := pxOnceClose(gr.gate), pxOnceClose(ga.gate)
	defer openRenew() // before Close (cleanup) waits for the session loop
	defer openAcquire()
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slow := pxReq("slow", "o", 300*time.Millisecond)
	slow.Session = sess.ID
	pxAcquire(t, p, slow)
	fc.WaitForTimers(1)
	fc.Advance(100 * time.Millisecond) // the loop renews "slow" and hangs
	<-gr.started

	late := pxReq("late", "o", time.Hour)
	late.Session = sess.ID
	errc := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, late)
		errc <- err
	}()
	<-ga.started            // the acquire checked the session (alive) and is on the store
	fc.Advance(time.Second) // the session expires meanwhile
	openAcquire()           // the store grants "late"
	if err := <-errc; !errors.Is(err, ErrNoSession) {
		t.Fatalf("Acquire granted while its session expired = %v, want ErrNoSession", err)
	}
	if _, err := p.Get(ctx, "late"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("the grant made as the session expired is still held: %v", err)
	}
}

func pxOnceClose(ch chan struct{}) func() {
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
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
	sess, err := p.OpenSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]uint64{}
	for _, name := range []string{"a", "b"} {
		req := pxReq(name, "o", time.Hour)
		req.Session = sess.ID
		tokens[name] = pxAcquire(t, p, req).Token
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
