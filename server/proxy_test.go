package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// Generous bounds for a noisy 2-core machine running -race: the tests
// assert order and counts, never speed.
const pxTimeout = 30 * time.Second

// pxNoWatch hides the memory store's Watch, so waiters poll with backoff.
type pxNoWatch struct{ leasehold.Store }

func pxNew(t testing.TB, store leasehold.Store, cfg ProxyConfig) *Proxy {
	t.Helper()
	p := NewProxy(store, cfg)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// pxFake returns a proxy on a fake clock, in front of a memory store on the
// same clock (wrapped by wrap, if set).
func pxFake(t *testing.T, wrap func(leasehold.Store) leasehold.Store) (*clock.Fake, *Proxy) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	var store leasehold.Store = memory.New(memory.WithClock(fc))
	if wrap != nil {
		store = wrap(store)
	}
	return fc, pxNew(t, store, ProxyConfig{Clock: fc})
}

func pxReq(name, owner string, ttl time.Duration) AcquireRequest {
	return AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: owner, TTL: ttl}}
}

func pxAcquire(t *testing.T, b Backend, req AcquireRequest) leasehold.Record {
	t.Helper()
	rec, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", req.Name, req.Owner, err)
	}
	return rec
}

// acquireAsync starts b.Acquire(ctx, req) and returns where its error
// arrives.
func acquireAsync(ctx context.Context, b Backend, req AcquireRequest) <-chan error {
	errc := make(chan error, 1)
	go func() { _, err := b.Acquire(ctx, req); errc <- err }()
	return errc
}

func pxOwners(ws []Waiter) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Owner)
	}
	return out
}

// within returns the next value from ch, or fails the test (saying what
// did not happen) after pxTimeout.
func within[T any](t *testing.T, ch <-chan T, what string, args ...any) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(pxTimeout):
		t.Fatalf(what, args...)
	}
	var zero T
	return zero
}

func pxRecv(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return ev
	case <-time.After(pxTimeout):
		t.Fatal("no event")
	}
	return Event{}
}

// pxNextOf returns the next event of one of the given types, skipping others.
func pxNextOf(t *testing.T, ch <-chan Event, types ...EventType) Event {
	t.Helper()
	for {
		ev := pxRecv(t, ch)
		for _, typ := range types {
			if ev.Type == typ {
				return ev
			}
		}
	}
}

func TestProxyWaitTimeout(t *testing.T) {
	fc, p := pxFake(t, nil)
	holder := pxAcquire(t, p, pxReq("job", "holder", time.Minute))

	// The head: a deadline timer and a timer for the holder's expiry.
	head := pxReq("job", "head", time.Minute)
	head.Wait = 10 * time.Second
	headErr := acquireAsync(context.Background(), p, head)
	fc.WaitForTimers(2)
	servertest.WaitFor(t, "head queued", func() bool { return len(p.Waiters("job")) == 1 })

	// A second waiter with a shorter Wait times out before it is head.
	second := pxReq("job", "second", time.Minute)
	second.Wait = 5 * time.Second
	secondErr := acquireAsync(context.Background(), p, second)
	servertest.WaitFor(t, "second queued", func() bool { return len(p.Waiters("job")) == 2 })
	fc.WaitForTimers(3)

	checkHeld := func(who string, err error) {
		t.Helper()
		var held *leasehold.HeldError
		if !errors.As(err, &held) || !errors.Is(err, leasehold.ErrHeld) {
			t.Fatalf("%s: %v, want *HeldError", who, err)
		}
		if held.Owner != "holder" || held.Token != holder.Token || held.Name != "job" {
			t.Fatalf("%s: HeldError %+v, want holder with token %d", who, held, holder.Token)
		}
		if held.Remaining <= 0 || held.Remaining > time.Minute {
			t.Fatalf("%s: remaining %s", who, held.Remaining)
		}
	}
	fc.Advance(5 * time.Second)
	checkHeld("second", within(t, secondErr, "second waiter did not time out"))
	if got := pxOwners(p.Waiters("job")); len(got) != 1 || got[0] != "head" {
		t.Fatalf("waiters %v after second timed out, want [head]", got)
	}

	fc.Advance(5 * time.Second)
	checkHeld("head", within(t, headErr, "head waiter did not time out"))
	if ws := p.Waiters("job"); len(ws) != 0 {
		t.Fatalf("waiters %v after both timed out", pxOwners(ws))
	}
	rec, err := p.Get(context.Background(), "job")
	if err != nil || rec.Owner != "holder" || rec.Token != holder.Token {
		t.Fatalf("Get = %+v, %v; want the holder's grant untouched", rec, err)
	}
	var dequeued int
	for _, ev := range p.Recent(100) {
		if ev.Type == EventDequeued {
			dequeued++
		}
	}
	if dequeued != 2 {
		t.Fatalf("%d dequeued events, want 2", dequeued)
	}
}

func TestProxyWaitCancel(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	holder := pxAcquire(t, p, pxReq("job", "holder", time.Minute))

	start := func(owner string) (context.CancelFunc, chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		req := pxReq("job", owner, time.Minute)
		req.Wait = time.Hour
		go func() {
			rec, err := p.Acquire(ctx, req)
			if err == nil {
				err = fmt.Errorf("granted %+v", rec)
			}
			errc <- err
		}()
		return cancel, errc
	}
	cancelA, errA := start("a")
	servertest.WaitFor(t, "a queued", func() bool { return len(p.Waiters("job")) == 1 })
	cancelB, errB := start("b")
	defer cancelB()
	servertest.WaitFor(t, "b queued", func() bool { return len(p.Waiters("job")) == 2 })

	cancelA() // the head leaves; b becomes head
	if err := within(t, errA, "cancelled waiter did not return"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a: %v, want context.Canceled", err)
	}
	if got := pxOwners(p.Waiters("job")); len(got) != 1 || got[0] != "b" {
		t.Fatalf("waiters %v, want [b]", got)
	}
	cancelB()
	if err := <-errB; !errors.Is(err, context.Canceled) {
		t.Fatalf("b: %v, want context.Canceled", err)
	}
	if ws := p.Waiters("job"); len(ws) != 0 {
		t.Fatalf("waiters %v after both cancelled", pxOwners(ws))
	}
	if err := p.Release(context.Background(), "job", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	// Nobody took the lease on the waiters' behalf.
	time.Sleep(20 * time.Millisecond)
	if rec, err := p.Get(context.Background(), "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("Get after release = %+v, %v; want ErrNotFound", rec, err)
	}
	if st := p.Stats(); st.Waiters != 0 {
		t.Fatalf("Stats.Waiters = %d", st.Waiters)
	}
}

// pxRacyStore grants once and then cancels the caller's context, and either
// returns the grant or (lostReply) the cancellation: a grant racing with
// cancellation, its outcome known or unknown to the proxy.
type pxRacyStore struct {
	leasehold.Store
	mu          sync.Mutex
	cancel      context.CancelFunc
	returnError bool
}

func (s *pxRacyStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := s.Store.TryAcquire(ctx, req)
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if err != nil || cancel == nil {
		return rec, err
	}
	s.mu.Lock()
	s.cancel = nil // once: the proxy's own clean-up then goes through
	s.mu.Unlock()
	cancel()
	if s.returnError {
		return leasehold.Record{}, ctx.Err() // granted, but the reply is lost
	}
	return rec, nil
}

func TestProxyGrantRacingCancel(t *testing.T) {
	for _, lostReply := range []bool{false, true} {
		t.Run(fmt.Sprintf("lostReply=%v", lostReply), func(t *testing.T) {
			rs := &pxRacyStore{Store: memory.New(), returnError: lostReply}
			p := pxNew(t, rs, ProxyConfig{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			rs.cancel = cancel
			req := pxReq("job", "w", time.Minute)
			req.Wait = time.Minute
			if _, err := p.Acquire(ctx, req); !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire: %v, want context.Canceled", err)
			}
			if rec, err := p.Get(context.Background(), "job"); !errors.Is(err, leasehold.ErrNotFound) {
				t.Fatalf("grant that raced with cancel still held: %+v, %v", rec, err)
			}
		})
	}
}

// Waiters are also handed the lease in order when each holder's lease
// expires instead of being released (the memory store's Watch says nothing
// on expiry: the head wakes at the holder's remaining time). With the fake
// clock the handoff is exact: the head wakes 1ms after the expiry.
func TestProxyFIFOExpiry(t *testing.T) {
	fc, p := pxFake(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := p.Subscribe(ctx, "x")
	const n = 3
	prev := pxAcquire(t, p, pxReq("x", "holder", time.Second))
	answers := queueWaiters(t, ctx, p, "x", n, time.Second, func(i int) {
		fc.WaitForTimers(i + 2) // every waiter's Wait, and the head's wake-up
	})
	for i := range n {
		fc.WaitForTimers(n - i + 1)
		fc.Advance(time.Second + time.Millisecond)
		r := within(t, answers, "w%d not granted after %s's lease expired", i, prev.Owner)
		if r.err != nil || r.i != i || r.rec.Token <= prev.Token {
			t.Fatalf("after %s expired: w%d got (%+v, %v), want w%d", prev.Owner, r.i, r.rec, r.err, i)
		}
		prev = r.rec
	}
	pxNextOf(t, events, EventGranted) // the holder's
	for i := range n {
		ev := pxNextOf(t, events, EventGranted)
		if ev.Owner != fmt.Sprintf("w%d", i) || ev.Handoff != time.Millisecond || ev.Waiters != n-1-i {
			t.Fatalf("grant %+v, want w%d with handoff 1ms and %d waiters behind", ev, i, n-1-i)
		}
	}
}
