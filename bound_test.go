package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// testBound is a Bound the test moves by hand.
type testBound struct {
	mu   sync.Mutex
	mono time.Time
	boot time.Duration
	err  error
	done chan struct{}
}

func (b *testBound) Deadline() (time.Time, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mono, b.boot
}

func (b *testBound) Done() <-chan struct{} { return b.done }

func (b *testBound) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *testBound) set(mono time.Time, boot time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mono, b.boot = mono, boot
}

func (b *testBound) end(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err = err
	close(b.done)
}

// boundStore bounds every grant of its inner store by b (nil: no bound).
type boundStore struct {
	leasehold.Store
	b *testBound
}

func (s boundStore) LeaseBound(leasehold.Record) leasehold.Bound {
	if s.b == nil {
		return nil
	}
	return s.b
}

var _ leasehold.BoundedStore = boundStore{}

func (e env) bound(life time.Duration) *testBound {
	return &testBound{mono: e.clock.Now().Add(life), boot: e.clock.Boot() + life, done: make(chan struct{})}
}

// A bounded lease's deadline is the earlier of its own and its bound's; it
// is lost when the bound's monotonic deadline passes, even with its own far
// away, and never held again when the bound moves on afterwards.
func TestBoundDeadlineIsTheEarlier(t *testing.T) {
	e := newEnv(t)
	b := e.bound(600 * time.Millisecond)
	l, err := e.client(t, "a", boundStore{e.store, b}).TryAcquire(context.Background(), "job", leasehold.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := b.Deadline(); !l.Deadline().Equal(want) {
		t.Fatalf("Deadline = %s, want the bound's %s", l.Deadline(), want)
	}
	// The bound moves on (a keepalive): so does the lease's deadline.
	b.set(e.clock.Now().Add(time.Second), e.clock.Boot()+time.Second)
	if want, _ := b.Deadline(); !l.Deadline().Equal(want) {
		t.Fatalf("Deadline = %s after the bound moved, want %s", l.Deadline(), want)
	}
	for i := 0; i < 9; i++ {
		e.step(l, 100*time.Millisecond)
		if !l.Held() {
			t.Fatalf("lost at +%dms, before the bound's deadline (+1s)", (i+1)*100)
		}
	}
	e.step(l, 100*time.Millisecond)
	if l.Held() {
		t.Fatal("Held() past the bound's deadline (its own is 9s away)")
	}
	waitClosed(t, l.Done(), "Done")
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	// A bound that moves on once it has passed does not bring the lease back.
	b.set(e.clock.Now().Add(time.Minute), e.clock.Boot()+time.Minute)
	if l.Held() {
		t.Fatal("Held() again after the bound moved on")
	}
}

// The bound's boot-time deadline counts as well: a suspend longer than the
// session's life ends the lease, though its own boot-time deadline is far.
func TestBoundBootDeadline(t *testing.T) {
	e := newEnv(t)
	b := e.bound(600 * time.Millisecond)
	l, err := e.client(t, "a", boundStore{e.store, b}).TryAcquire(context.Background(), "job", leasehold.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.clock.WaitForTimers(1)
	e.clock.Suspend(time.Second)
	if l.Held() {
		t.Fatal("Held() after a suspend past the bound's boot-time deadline")
	}
	waitClosed(t, l.Done(), "Done")
}

// When the bound ends (the session is lost or closed) the lease is lost
// at once, without the clock moving, and its context is cancelled.
func TestBoundEndLosesLeaseAtOnce(t *testing.T) {
	e := newEnv(t)
	b := e.bound(time.Minute)
	c := e.client(t, "a", boundStore{e.store, b})
	l, err := c.TryAcquire(context.Background(), "job", leasehold.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	e.clock.WaitForTimers(1) // the keepalive sleeps until its renewal
	cause := errors.New("session 42 refused")
	b.end(cause)
	waitClosed(t, l.Done(), "Done after the bound ended")
	if l.Held() {
		t.Fatal("Held() after the bound ended")
	}
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	waitClosed(t, ctx.Done(), "lease context")
	if !errors.Is(context.Cause(ctx), leasehold.ErrLost) {
		t.Fatalf("context cause = %v", context.Cause(ctx))
	}
	// The lease was never renewed and the store still has it; releasing
	// it is still possible and answers as for any lost lease.
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("Release: %v", err)
	}
}

// A bounded store that reports no bound for a grant leaves the lease to
// its own deadline.
func TestNilBoundIsUnbounded(t *testing.T) {
	e := newEnv(t)
	l, err := e.client(t, "a", boundStore{e.store, nil}).TryAcquire(context.Background(), "job", leasehold.TTL(time.Second), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	want := e.clock.Now().Add(time.Second - 10*time.Millisecond - 5*time.Millisecond)
	if !l.Deadline().Equal(want) {
		t.Fatalf("Deadline = %s, want its own %s", l.Deadline(), want)
	}
	if !l.Held() {
		t.Fatal("not held")
	}
}

// A renewal confirmed after the bound's deadline does not save the lease.
func TestRenewAfterBoundDeadlineIsLost(t *testing.T) {
	e := newEnv(t)
	b := e.bound(600 * time.Millisecond)
	l, err := e.client(t, "a", boundStore{e.store, b}).TryAcquire(context.Background(), "job", leasehold.TTL(10*time.Second), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(700 * time.Millisecond)
	if err := l.Renew(context.Background()); !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("Renew past the bound's deadline = %v, want ErrLost", err)
	}
	if l.Held() {
		t.Fatal("Held() after a renewal confirmed past the bound's deadline")
	}
}
