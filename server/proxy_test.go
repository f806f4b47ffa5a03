package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/storetest"
)

// Generous bounds for a noisy 2-core machine running -race: the tests
// assert order and counts, never speed.
const pxTimeout = 30 * time.Second

// pxNoWatch hides the memory store's Watch, so waiters poll with backoff.
type pxNoWatch struct{ leasehold.Store }

func pxNew(t *testing.T, store leasehold.Store, cfg ProxyConfig) *Proxy {
	t.Helper()
	p := NewProxy(store, cfg)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func pxWaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(pxTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func pxReq(name, owner string, ttl time.Duration) AcquireRequest {
	return AcquireRequest{AcquireRequest: leasehold.AcquireRequest{Name: name, Owner: owner, TTL: ttl}}
}

func pxAcquire(t *testing.T, p *Proxy, req AcquireRequest) leasehold.Record {
	t.Helper()
	rec, err := p.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("Acquire(%s by %s): %v", req.Name, req.Owner, err)
	}
	return rec
}

func pxOwners(ws []Waiter) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Owner)
	}
	return out
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

func TestProxyFIFO(t *testing.T) {
	for _, mode := range []string{"watch", "backoff"} {
		t.Run(mode, func(t *testing.T) {
			var store leasehold.Store = memory.New()
			if mode == "backoff" {
				store = pxNoWatch{store}
			}
			p := pxNew(t, store, ProxyConfig{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			events := p.Subscribe(ctx, "fifo")
			const name, n = "fifo", 10

			prev := pxAcquire(t, p, pxReq(name, "holder", time.Minute))
			type result struct {
				i   int
				rec leasehold.Record
				err error
			}
			results := make(chan result, n)
			for i := range n {
				go func() {
					req := pxReq(name, fmt.Sprintf("w%d", i), time.Minute)
					req.Wait = time.Hour
					rec, err := p.Acquire(ctx, req)
					results <- result{i, rec, err}
				}()
				pxWaitUntil(t, fmt.Sprintf("%d waiters", i+1), func() bool { return len(p.Waiters(name)) == i+1 })
			}
			ws := p.Waiters(name)
			for i, w := range ws {
				if want := fmt.Sprintf("w%d", i); w.Owner != want {
					t.Fatalf("queue %v, want w0..w9 in order", pxOwners(ws))
				}
			}
			if st := p.Stats(); st.Waiters != n {
				t.Fatalf("Stats.Waiters = %d, want %d", st.Waiters, n)
			}

			for i := range n {
				if err := p.Release(context.Background(), name, prev.Owner, prev.Token); err != nil {
					t.Fatalf("release %s: %v", prev.Owner, err)
				}
				var r result
				select {
				case r = <-results:
				case <-time.After(pxTimeout):
					t.Fatalf("w%d not granted after %s released", i, prev.Owner)
				}
				if r.err != nil || r.i != i {
					t.Fatalf("after %s released: w%d got (%v, %v), want w%d granted", prev.Owner, r.i, r.rec, r.err, i)
				}
				if r.rec.Token <= prev.Token {
					t.Fatalf("token %d after %d", r.rec.Token, prev.Token)
				}
				if got := len(p.Waiters(name)); got != n-1-i {
					t.Fatalf("%d waiters after w%d's grant, want %d", got, i, n-1-i)
				}
				prev = r.rec
			}
			if err := p.Release(context.Background(), name, prev.Owner, prev.Token); err != nil {
				t.Fatal(err)
			}

			// Grants and releases alternate, in queue order; each queued
			// waiter's grant is a handoff.
			want := []string{"granted holder", "released holder"}
			for i := range n {
				w := fmt.Sprintf("w%d", i)
				want = append(want, "granted "+w, "released "+w)
			}
			for _, wantEv := range want {
				ev := pxNextOf(t, events, EventGranted, EventReleased)
				if got := string(ev.Type) + " " + ev.Owner; got != wantEv {
					t.Fatalf("event %q, want %q", got, wantEv)
				}
				if ev.Type == EventGranted && ev.Owner != "holder" && ev.Handoff < 0 {
					t.Fatalf("grant to %s: handoff %s", ev.Owner, ev.Handoff)
				}
			}
			if _, err := p.Get(context.Background(), name); !errors.Is(err, leasehold.ErrNotFound) {
				t.Fatalf("Get after all released: %v", err)
			}
		})
	}
}

func TestProxyWaitTimeout(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: fc})
	holder := pxAcquire(t, p, pxReq("job", "holder", time.Minute))

	// The head: a deadline timer and a timer for the holder's expiry.
	head := pxReq("job", "head", time.Minute)
	head.Wait = 10 * time.Second
	headErr := make(chan error, 1)
	go func() { _, err := p.Acquire(context.Background(), head); headErr <- err }()
	fc.WaitForTimers(2)
	pxWaitUntil(t, "head queued", func() bool { return len(p.Waiters("job")) == 1 })

	// A second waiter with a shorter Wait times out before it is head.
	second := pxReq("job", "second", time.Minute)
	second.Wait = 5 * time.Second
	secondErr := make(chan error, 1)
	go func() { _, err := p.Acquire(context.Background(), second); secondErr <- err }()
	pxWaitUntil(t, "second queued", func() bool { return len(p.Waiters("job")) == 2 })
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
	select {
	case err := <-secondErr:
		checkHeld("second", err)
	case <-time.After(pxTimeout):
		t.Fatal("second waiter did not time out")
	}
	if got := pxOwners(p.Waiters("job")); len(got) != 1 || got[0] != "head" {
		t.Fatalf("waiters %v after second timed out, want [head]", got)
	}

	fc.Advance(5 * time.Second)
	select {
	case err := <-headErr:
		checkHeld("head", err)
	case <-time.After(pxTimeout):
		t.Fatal("head waiter did not time out")
	}
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
	pxWaitUntil(t, "a queued", func() bool { return len(p.Waiters("job")) == 1 })
	cancelB, errB := start("b")
	defer cancelB()
	pxWaitUntil(t, "b queued", func() bool { return len(p.Waiters("job")) == 2 })

	cancelA() // the head leaves; b becomes head
	select {
	case err := <-errA:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a: %v, want context.Canceled", err)
		}
	case <-time.After(pxTimeout):
		t.Fatal("cancelled waiter did not return")
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

// pxStep advances the fake clock and waits until the session loop has done
// what became due (it has armed its next timer, or the session ended).
func pxStep(t *testing.T, fc *clock.Fake, p *Proxy, d time.Duration) {
	t.Helper()
	fc.Advance(d)
	pxWaitUntil(t, "session loop idle", func() bool { return fc.Timers() >= 1 || p.Stats().Sessions == 0 })
}

func TestProxySessionKeepsLeases(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: fc})
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fc.WaitForTimers(1)

	short := pxReq("s/short", "o", 300*time.Millisecond)
	short.Session = sess.ID
	a := pxAcquire(t, p, short)
	dflt := pxReq("s/default", "o", 0) // TTL 0: the session's TTL
	dflt.Session = sess.ID
	b := pxAcquire(t, p, dflt)
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
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: fc})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := p.Subscribe(ctx, "e/")
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fc.WaitForTimers(1)
	// A lease TTL longer than the session's: only the proxy's release can
	// free it when the session expires.
	req := pxReq("e/lease", "o", time.Hour)
	req.Session = sess.ID
	rec := pxAcquire(t, p, req)
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
	req.RequestID = ""
	if _, err := p.Acquire(ctx, req); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Acquire in expired session: %v", err)
	}
	if st := p.Stats(); st.Sessions != 0 {
		t.Fatalf("Stats.Sessions = %d", st.Sessions)
	}
}

func TestProxyUnknownSession(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	ctx := context.Background()
	for _, wait := range []time.Duration{0, time.Minute} {
		req := pxReq("u", "o", time.Minute)
		req.Session, req.Wait = "0123456789abcdef0123456789abcdef", wait
		if _, err := p.Acquire(ctx, req); !errors.Is(err, ErrNoSession) {
			t.Fatalf("Acquire with unknown session (wait %s): %v", wait, err)
		}
	}
	if recs, err := p.List(ctx, ""); err != nil || len(recs) != 0 {
		t.Fatalf("List = %v, %v; want nothing acquired", recs, err)
	}
	if _, err := p.KeepAlive(ctx, "nope"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("KeepAlive: %v", err)
	}
	if err := p.CloseSession(ctx, "nope"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("CloseSession: %v", err)
	}
	if ev := p.Recent(10); len(ev) != 0 {
		t.Fatalf("events %v", ev)
	}
}

func TestProxyWaiterLeavesWithSession(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	ctx := context.Background()
	pxAcquire(t, p, pxReq("job", "holder", time.Minute))
	sess, err := p.OpenSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req := pxReq("job", "w", 0)
	req.Session, req.Wait = sess.ID, time.Hour
	errc := make(chan error, 1)
	go func() { _, err := p.Acquire(ctx, req); errc <- err }()
	pxWaitUntil(t, "w queued", func() bool { return len(p.Waiters("job")) == 1 })
	if ws := p.Waiters("job"); ws[0].Session != sess.ID {
		t.Fatalf("waiter's session %q", ws[0].Session)
	}
	if err := p.CloseSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrNoSession) {
		t.Fatalf("waiter after its session closed: %v", err)
	}
	pxWaitUntil(t, "queue empty", func() bool { return len(p.Waiters("job")) == 0 })
}

func TestProxyInvalidInput(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	held := pxAcquire(t, p, pxReq("held", "o", time.Minute))
	before := len(p.Recent(100))

	bad := []struct {
		name string
		req  AcquireRequest
	}{
		{"empty name", pxReq("", "o", time.Minute)},
		{"control char in name", pxReq("a\nb", "o", time.Minute)},
		{"invalid UTF-8", pxReq("a\xffb", "o", time.Minute)},
		{"long name", pxReq(strings.Repeat("n", leasehold.MaxNameLen+1), "o", time.Minute)},
		{"empty owner", pxReq("x", "", time.Minute)},
		{"ttl too short", pxReq("x", "o", time.Millisecond)},
		{"ttl too long", pxReq("x", "o", 25*time.Hour)},
		{"ttl zero without session", pxReq("x", "o", 0)},
		{"negative wait", func() AcquireRequest { r := pxReq("x", "o", time.Minute); r.Wait = -time.Second; return r }()},
		{"data too large", func() AcquireRequest {
			r := pxReq("x", "o", time.Minute)
			r.Data = make([]byte, leasehold.MaxDataLen+1)
			return r
		}()},
		{"bad name with unknown session", func() AcquireRequest {
			r := pxReq("", "o", 0)
			r.Session = "unknown"
			return r
		}()},
		{"bad ttl in session", func() AcquireRequest {
			r := pxReq("x", "o", time.Microsecond)
			r.Session = sess.ID
			return r
		}()},
	}
	check := func(what string, err error) {
		t.Helper()
		var inv *leasehold.InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("%s: %v, want *InvalidError", what, err)
		}
	}
	for _, c := range bad {
		for _, wait := range []time.Duration{0, time.Minute} {
			r := c.req
			if r.Wait == 0 {
				r.Wait = wait
			}
			_, err := p.Acquire(ctx, r)
			check(c.name, err)
		}
	}
	check("renew token 0", p.Renew(ctx, "held", "o", 0, time.Minute))
	check("renew bad ttl", p.Renew(ctx, "held", "o", held.Token, 0))
	check("renew bad name", p.Renew(ctx, "", "o", held.Token, time.Minute))
	check("release empty owner", p.Release(ctx, "held", "", held.Token))
	check("release token 0", p.Release(ctx, "held", "o", 0))
	_, err = p.ForceRelease(ctx, "a\x00b")
	check("force bad name", err)
	_, err = p.Get(ctx, "")
	check("get empty name", err)
	_, err = p.List(ctx, "p\x01")
	check("list bad prefix", err)
	_, err = p.OpenSession(ctx, 0)
	check("session ttl 0", err)
	_, err = p.OpenSession(ctx, 48*time.Hour)
	check("session ttl too long", err)

	recs, err := p.List(ctx, "")
	if err != nil || len(recs) != 1 || recs[0].Name != "held" || recs[0].Token != held.Token {
		t.Fatalf("List = %+v, %v; want only the untouched lease", recs, err)
	}
	if n := len(p.Recent(100)); n != before {
		t.Fatalf("%d events after bad input, want %d", n, before)
	}
	if st := p.Stats(); st.Sessions != 1 || st.Waiters != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestProxySubscribe(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	events := p.Subscribe(ctx, "a/")
	bg := context.Background()

	x := pxAcquire(t, p, pxReq("a/x", "o1", time.Minute))
	y := pxAcquire(t, p, pxReq("b/y", "o2", time.Minute)) // other prefix
	if err := p.Renew(bg, x.Name, x.Owner, x.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(bg, x.Name, x.Owner, x.Token); err != nil {
		t.Fatal(err)
	}
	z := pxAcquire(t, p, pxReq("a/z", "o3", time.Minute))
	if f, err := p.ForceRelease(bg, "a/z"); err != nil || f.Token != z.Token || f.Owner != "o3" {
		t.Fatalf("ForceRelease = %+v, %v", f, err)
	}
	if _, err := p.ForceRelease(bg, "a/z"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("ForceRelease of a free lease: %v", err)
	}
	if err := p.Release(bg, y.Name, y.Owner, y.Token); err != nil {
		t.Fatal(err)
	}

	want := []Event{
		{Type: EventGranted, Name: "a/x", Owner: "o1", Token: x.Token},
		{Type: EventRenewed, Name: "a/x", Owner: "o1", Token: x.Token},
		{Type: EventReleased, Name: "a/x", Owner: "o1", Token: x.Token},
		{Type: EventGranted, Name: "a/z", Owner: "o3", Token: z.Token},
		{Type: EventForced, Name: "a/z", Owner: "o3", Token: z.Token},
	}
	for _, w := range want {
		ev := pxRecv(t, events)
		if ev.Type != w.Type || ev.Name != w.Name || ev.Owner != w.Owner || ev.Token != w.Token {
			t.Fatalf("event %+v, want %+v", ev, w)
		}
		if ev.Time.IsZero() {
			t.Fatalf("event %+v without time", ev)
		}
	}
	cancel()
	for ev := range events { // closed after ctx ends; nothing else for a/
		t.Fatalf("unexpected event %+v", ev)
	}

	recent := p.Recent(3)
	if len(recent) != 3 || recent[0].Type != EventGranted || recent[1].Type != EventForced || recent[2].Name != "b/y" {
		t.Fatalf("Recent(3) = %+v", recent)
	}
	if all := p.Recent(1000); len(all) != 7 {
		t.Fatalf("Recent(1000) has %d events, want 7", len(all))
	}
}

func TestProxySubscribeOverflow(t *testing.T) {
	p := pxNew(t, memory.New(), ProxyConfig{RecentEvents: 5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := p.Subscribe(ctx, "")
	n := subBuffer + 10 // more than a subscriber's buffer
	for i := range n {
		pxAcquire(t, p, pxReq(fmt.Sprintf("n%d", i), "o", time.Minute))
	}
	for i := range subBuffer {
		ev := pxRecv(t, events)
		if ev.Type != EventGranted || ev.Name != fmt.Sprintf("n%d", i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
	// The subscriber fell behind: one overflow, then delivery resumes.
	pxAcquire(t, p, pxReq("later", "o", time.Minute))
	if ev := pxRecv(t, events); ev.Type != EventOverflow {
		t.Fatalf("after the buffer filled: %+v, want overflow", ev)
	}
	if ev := pxRecv(t, events); ev.Name != "later" {
		t.Fatalf("after catching up: %+v", ev)
	}
	if r := p.Recent(100); len(r) != 5 || r[0].Name != fmt.Sprintf("n%d", n-4) || r[4].Name != "later" {
		t.Fatalf("Recent = %+v", r)
	}
}

func TestProxyHooksAndStats(t *testing.T) {
	var mu sync.Mutex
	var seen []EventType
	p := pxNew(t, memory.New(), ProxyConfig{
		Durable: true,
		Hooks: Hooks{Event: func(ev Event) {
			mu.Lock()
			seen = append(seen, ev.Type)
			mu.Unlock()
		}},
	})
	ctx := context.Background()
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	a := pxAcquire(t, p, pxReq("h/a", "o", time.Minute))
	pxAcquire(t, p, pxReq("h/b", "o", time.Minute))
	if err := p.Release(ctx, a.Name, a.Owner, a.Token); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := fmt.Sprint(seen)
	mu.Unlock()
	if got != "[granted granted released]" {
		t.Fatalf("hook saw %s", got)
	}
	st := p.Stats()
	if !st.Durable || st.Waiters != 0 || st.Sessions != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	pxWaitUntil(t, "Held counts the live lease", func() bool { return p.Stats().Held == 1 })
}

func TestProxyClose(t *testing.T) {
	store := memory.New()
	p := NewProxy(store, ProxyConfig{})
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req := pxReq("c/s", "o", time.Minute)
	req.Session = sess.ID
	rec := pxAcquire(t, p, req)
	pxAcquire(t, p, pxReq("c/h", "holder", time.Minute))
	w := pxReq("c/h", "w", time.Minute)
	w.Wait = time.Hour
	errc := make(chan error, 1)
	go func() { _, err := p.Acquire(ctx, w); errc <- err }()
	pxWaitUntil(t, "w queued", func() bool { return len(p.Waiters("c/h")) == 1 })
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := p.Subscribe(subCtx, "c/s")

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("waiter at Close: %v", err)
	}
	if ev := pxRecv(t, events); ev.Type != EventReleased || ev.Token != rec.Token {
		t.Fatalf("event at Close: %+v, want the session lease released", ev)
	}
	if _, open := <-events; open {
		t.Fatal("subscription open after Close")
	}
	if _, err := p.Acquire(ctx, pxReq("c/x", "o", time.Minute)); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if _, err := p.OpenSession(ctx, time.Minute); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("OpenSession after Close: %v", err)
	}
	if err := p.Ready(ctx); err == nil {
		t.Fatal("Ready after Close")
	}
	if _, err := store.Get(ctx, "c/s"); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("store not closed: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// The proxy, presented as a store again, passes the store conformance
// suite (over the memory store; in both watch and polling modes).
func TestProxyConformance(t *testing.T) {
	for _, mode := range []string{"watch", "backoff"} {
		t.Run(mode, func(t *testing.T) {
			storetest.Run(t, storetest.Harness{
				Open: func(testing.TB) leasehold.Store {
					var s leasehold.Store = memory.New()
					if mode == "backoff" {
						s = pxNoWatch{s}
					}
					return StoreOf(NewProxy(s, ProxyConfig{}))
				},
			})
		})
	}
}

// Waiters are also handed the lease in order when each holder's lease
// expires instead of being released (the memory store's Watch says nothing
// on expiry: the head wakes at the holder's remaining time). With the fake
// clock the handoff is exact: the head wakes 1ms after the expiry.
func TestProxyFIFOExpiry(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: fc})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := p.Subscribe(ctx, "x")
	const n = 3
	prev := pxAcquire(t, p, pxReq("x", "holder", time.Second))
	type result struct {
		i   int
		rec leasehold.Record
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			req := pxReq("x", fmt.Sprintf("w%d", i), time.Second)
			req.Wait = time.Hour
			rec, err := p.Acquire(ctx, req)
			results <- result{i, rec, err}
		}()
		pxWaitUntil(t, "queued", func() bool { return len(p.Waiters("x")) == i+1 })
		fc.WaitForTimers(i + 2) // every waiter's Wait, and the head's wake-up
	}
	for i := range n {
		fc.WaitForTimers(n - i + 1)
		fc.Advance(time.Second + time.Millisecond)
		var r result
		select {
		case r = <-results:
		case <-time.After(pxTimeout):
			t.Fatalf("w%d not granted after %s's lease expired", i, prev.Owner)
		}
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

// A holder's Renew of a session lease keeps the session alive and sets the
// TTL the proxy renews the lease with.
func TestProxyRenewSessionLease(t *testing.T) {
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: fc})
	ctx := context.Background()
	sess, err := p.OpenSession(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	req := pxReq("r", "o", 300*time.Millisecond)
	req.Session = sess.ID
	rec := pxAcquire(t, p, req)
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

type pxDownStore struct{ leasehold.Store }

var errPxDown = errors.New("engine unreachable")

func (pxDownStore) Get(context.Context, string) (leasehold.Record, error) {
	return leasehold.Record{}, errPxDown
}

func TestProxyReady(t *testing.T) {
	if err := pxNew(t, memory.New(), ProxyConfig{}).Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := pxNew(t, pxDownStore{memory.New()}, ProxyConfig{}).Ready(context.Background()); !errors.Is(err, errPxDown) {
		t.Fatalf("Ready with the engine down: %v", err)
	}
}

// Two proxies over one SQLite file stand for two server instances sharing
// an engine: their waiters compete through the engine (FIFO holds only
// within each instance), and the engine keeps them mutually exclusive,
// with tokens strictly increasing in grant order, and everyone served.
func TestProxyTwoInstancesShareEngine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	var proxies []*Proxy
	for range 2 {
		s, err := sqlite.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, pxNew(t, s, ProxyConfig{}))
	}
	const perProxy, rounds = 3, 8
	var (
		mu        sync.Mutex
		inside    int
		lastToken uint64
		grants    = map[int]int{}
	)
	var wg sync.WaitGroup
	errc := make(chan error, 2*perProxy)
	for pi, p := range proxies {
		for g := range perProxy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("p%d-g%d", pi, g)
				for range rounds {
					req := pxReq("shared", owner, 30*time.Second)
					req.Wait = time.Minute
					rec, err := p.Acquire(context.Background(), req)
					if err != nil {
						errc <- fmt.Errorf("%s: %w", owner, err)
						return
					}
					mu.Lock()
					inside++
					if inside != 1 || rec.Token <= lastToken {
						mu.Unlock()
						errc <- fmt.Errorf("%s granted token %d while %d inside, last token %d", owner, rec.Token, inside-1, lastToken)
						return
					}
					lastToken = rec.Token
					grants[pi]++
					mu.Unlock()
					time.Sleep(100 * time.Microsecond) // hold it a little
					mu.Lock()
					inside--
					mu.Unlock()
					if err := p.Release(context.Background(), "shared", owner, rec.Token); err != nil {
						errc <- fmt.Errorf("%s release: %w", owner, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if grants[0] != perProxy*rounds || grants[1] != perProxy*rounds {
		t.Fatalf("grants per instance %v, want %d each", grants, perProxy*rounds)
	}
	for _, p := range proxies {
		if n := p.Stats().Waiters; n != 0 {
			t.Fatalf("%d waiters left", n)
		}
	}
}
