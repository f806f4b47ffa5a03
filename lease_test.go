package leasehold_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// env is a fake clock shared by a memory store and a client, so tests move
// time instead of sleeping through TTLs.
type env struct {
	clock *clock.Fake
	store *memory.Store
}

func newEnv(t *testing.T) env {
	f := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memory.New(memory.WithClock(f))
	t.Cleanup(func() { s.Close() })
	return env{clock: f, store: s}
}

func (e env) client(t *testing.T, owner string, store leasehold.Store, opts ...leasehold.Option) *leasehold.Client {
	t.Helper()
	if store == nil {
		store = e.store
	}
	c, err := leasehold.New(store, append([]leasehold.Option{leasehold.WithOwner(owner), leasehold.WithClock(e.clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// step waits until the lease's goroutine sleeps on its timer (or the lease
// is done), then moves the clock by d.
func (e env) step(l *leasehold.Lease, d time.Duration) {
	for e.clock.Timers() < 1 {
		select {
		case <-l.Done():
			return
		case <-time.After(50 * time.Microsecond):
		}
	}
	e.clock.Advance(d)
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not closed", what)
	}
}

func TestKeepaliveHoldsForManyTTLs(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l, err := e.client(t, "a", nil).TryAcquire(ctx, "job", leasehold.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ { // 100 × 300ms = 10 TTLs
		e.step(l, 300*time.Millisecond)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lease lost although renewed: %v", err)
	}
	rec, err := e.store.Get(ctx, "job")
	if err != nil || rec.Token != l.Token() || rec.Owner != "a" {
		t.Fatalf("store has %+v, %v", rec, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(ctx, "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after release: %v", err)
	}
}

func TestDeadlineTakenBeforeTheRequest(t *testing.T) {
	e := newEnv(t)
	slow := &slowStore{Store: e.store, clock: e.clock, delay: 700 * time.Millisecond}
	c := e.client(t, "a", slow, leasehold.WithDrift(0.01, 5*time.Millisecond))
	t0 := e.clock.Now()
	l, err := c.TryAcquire(context.Background(), "job", leasehold.TTL(10*time.Second), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	want := t0.Add(10*time.Second - 100*time.Millisecond - 5*time.Millisecond)
	if got := l.Deadline(); !got.Equal(want) {
		t.Fatalf("deadline %s after t0, want %s (from before the request, minus rho and eps)", got.Sub(t0), want.Sub(t0))
	}
}

func TestLostWhenStoreUnreachable(t *testing.T) {
	e := newEnv(t)
	fs := &failingStore{Store: e.store}
	c := e.client(t, "a", fs)
	t0 := e.clock.Now()
	l, err := c.TryAcquire(context.Background(), "job", leasehold.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fs.fail.Store(true)
	for l.Err() == nil {
		e.step(l, 100*time.Millisecond)
		if e.clock.Now().Sub(t0) > time.Minute {
			t.Fatal("lease never declared lost")
		}
	}
	waitClosed(t, l.Done(), "Done")
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	lostAt := e.clock.Now().Sub(t0)
	deadline := 3*time.Second - 30*time.Millisecond - 5*time.Millisecond
	if lostAt < deadline || lostAt > deadline+100*time.Millisecond {
		t.Errorf("lost at %s, want at the local deadline %s", lostAt, deadline)
	}
	if fs.renewals.Load() < 2 {
		t.Errorf("only %d renewal attempts before giving up", fs.renewals.Load())
	}
	if l.Held() {
		t.Error("Held() after loss")
	}
}

func TestLostWhenRenewalRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	l, err := e.client(t, "a", nil).TryAcquire(ctx, "job", leasehold.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// An operator force-releases it; the next renewal is refused.
	if err := e.store.Release(ctx, "job", "a", l.Token()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20 && l.Err() == nil; i++ {
		e.step(l, 500*time.Millisecond)
	}
	waitClosed(t, l.Done(), "Done")
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	if err := l.Release(ctx); !errors.Is(err, leasehold.ErrLost) && err != nil {
		t.Fatalf("Release after loss: %v", err)
	}
}

func TestSuspendedHolderKnowsItLost(t *testing.T) {
	e := newEnv(t)
	l, err := e.client(t, "a", nil).TryAcquire(context.Background(), "job", leasehold.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.step(l, 100*time.Millisecond)
	e.clock.WaitForTimers(1)
	e.clock.Suspend(6 * time.Second) // the monotonic clock and timers stand still
	if l.Held() {
		t.Fatal("Held() is true after a suspend longer than the TTL")
	}
	e.step(l, time.Second) // the goroutine wakes within maxSleep of resuming
	waitClosed(t, l.Done(), "Done after suspend")
	if !errors.Is(l.Err(), leasehold.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	for _, push := range []bool{true, false} {
		s := memory.New()
		var store leasehold.Store = s
		if !push {
			store = struct{ leasehold.Store }{s} // hides Watch: backoff polling
		}
		a, _ := leasehold.New(store, leasehold.WithOwner("a"))
		b, _ := leasehold.New(store, leasehold.WithOwner("b"))
		ctx := context.Background()
		la, err := a.TryAcquire(ctx, "job", leasehold.TTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		var waits atomic.Int32
		got := make(chan *leasehold.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			l, err := b.Acquire(ctx, "job", leasehold.TTL(time.Minute), leasehold.OnWait(func(h *leasehold.HeldError) {
				if h.Owner == "a" {
					waits.Add(1)
				}
			}))
			got <- l
			errc <- err
		}()
		for waits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb := <-got
		if err := <-errc; err != nil {
			t.Fatalf("push=%v: %v", push, err)
		}
		if lb.Owner() != "b" || lb.Token() <= la.Token() {
			t.Fatalf("push=%v: b got %s/%d after %d", push, lb.Owner(), lb.Token(), la.Token())
		}
		if push && waits.Load() != 1 {
			t.Errorf("with push, the waiter asked %d times while held, want 1", waits.Load())
		}
		lb.Release(ctx)
	}
}

func TestAcquireRetriesTransientErrorsWithSameRequestID(t *testing.T) {
	s := memory.New()
	fs := &lossyStore{Store: s}
	c, _ := leasehold.New(fs, leasehold.WithOwner("a"))
	l, err := c.Acquire(context.Background(), "job", leasehold.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if fs.calls.Load() != 2 {
		t.Fatalf("%d attempts, want 2 (first reply lost)", fs.calls.Load())
	}
	if l.Token() != 1 {
		t.Fatalf("token %d: the retry did not get its own first grant back", l.Token())
	}
}

func TestDoCancelsOnLoss(t *testing.T) {
	e := newEnv(t)
	c := e.client(t, "a", nil)
	started := make(chan *leasehold.Lease, 1)
	res := make(chan error, 1)
	go func() {
		res <- c.Do(context.Background(), "job", func(ctx context.Context) error {
			l, _ := leasehold.LeaseFromContext(ctx)
			started <- l
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), leasehold.ErrLost) {
				return errors.New("cause is not ErrLost")
			}
			return nil
		}, leasehold.TTL(3*time.Second))
	}()
	l := <-started
	if err := e.store.Release(context.Background(), "job", "a", l.Token()); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case err := <-res:
			if !errors.Is(err, leasehold.ErrLost) {
				t.Fatalf("Do returned %v, want ErrLost", err)
			}
			return
		default:
			e.step(l, 100*time.Millisecond)
		}
	}
}

func TestDoReleases(t *testing.T) {
	s := memory.New()
	c, _ := leasehold.New(s, leasehold.WithOwner("a"))
	ran := false
	err := c.Do(context.Background(), "job", func(ctx context.Context) error {
		ran = true
		if _, err := s.Get(ctx, "job"); err != nil {
			return err
		}
		return nil
	})
	if err != nil || !ran {
		t.Fatalf("Do: %v (ran %v)", err, ran)
	}
	if _, err := s.Get(context.Background(), "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("lease not released after Do: %v", err)
	}
	want := errors.New("boom")
	if err := c.Do(context.Background(), "job", func(context.Context) error { return want }); err != want {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
}

func TestBadOptionsAndArguments(t *testing.T) {
	s := memory.New()
	if _, err := leasehold.New(nil); !errors.Is(err, leasehold.ErrInvalid) {
		t.Errorf("New(nil): %v", err)
	}
	for _, o := range []leasehold.Option{
		leasehold.WithOwner(""), leasehold.WithOwner("a\x00"), leasehold.WithDrift(-1, 0),
		leasehold.WithDrift(0.01, -time.Second), leasehold.WithBackoff(0, time.Second),
		leasehold.WithBackoff(time.Second, time.Millisecond), leasehold.WithClock(nil),
	} {
		if _, err := leasehold.New(s, o); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("bad option accepted: %v", err)
		}
	}
	c, _ := leasehold.New(s, leasehold.WithOwner("a"), leasehold.WithDrift(0.01, 20*time.Millisecond))
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []leasehold.AcquireOption
	}{
		{"", nil},
		{"job", []leasehold.AcquireOption{leasehold.TTL(time.Microsecond)}},
		{"job", []leasehold.AcquireOption{leasehold.TTL(15 * time.Millisecond)}}, // margin eats it
		{"job", []leasehold.AcquireOption{leasehold.Data(make([]byte, leasehold.MaxDataLen+1))}},
		{"job", []leasehold.AcquireOption{leasehold.RequestID("\n")}},
	} {
		if _, err := c.TryAcquire(ctx, tc.name, tc.opts...); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("TryAcquire(%q): %v, want ErrInvalid", tc.name, err)
		}
		if _, err := c.Acquire(ctx, tc.name, tc.opts...); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("Acquire(%q): %v, want ErrInvalid", tc.name, err)
		}
	}
	if l, _ := s.List(ctx, ""); len(l) != 0 {
		t.Errorf("invalid calls left leases: %+v", l)
	}
}

// slowStore moves the fake clock during TryAcquire, as a slow reply would.
type slowStore struct {
	leasehold.Store
	clock *clock.Fake
	delay time.Duration
}

func (s *slowStore) TryAcquire(ctx context.Context, r leasehold.AcquireRequest) (leasehold.Record, error) {
	s.clock.Advance(s.delay)
	return s.Store.TryAcquire(ctx, r)
}

// failingStore makes renewals fail like an unreachable engine.
type failingStore struct {
	leasehold.Store
	fail     atomic.Bool
	renewals atomic.Int32
}

func (s *failingStore) Renew(ctx context.Context, n, o string, tok uint64, ttl time.Duration) error {
	if s.fail.Load() {
		s.renewals.Add(1)
		return errors.New("connection refused")
	}
	return s.Store.Renew(ctx, n, o, tok, ttl)
}

// lossyStore grants the first acquire but loses its reply.
type lossyStore struct {
	leasehold.Store
	calls atomic.Int32
}

func (s *lossyStore) TryAcquire(ctx context.Context, r leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := s.Store.TryAcquire(ctx, r)
	if s.calls.Add(1) == 1 && err == nil {
		return leasehold.Record{}, errors.New("reply lost")
	}
	return rec, err
}
