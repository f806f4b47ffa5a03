package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// backendCase is one way the server keeps its leases: the Engine,
// memory-only or durable, or a Proxy in front of a store. Behaviour that
// the Backend interface promises is tested once, over all of them.
type backendCase struct {
	name string
	// open returns a new backend, closed when the test ends.
	open func(t testing.TB) Backend
	// reopen, for a durable backend, closes b and opens it again on the
	// same state.
	reopen func(t testing.TB, b Backend) Backend
	// noRecords: the store behind it has no versioned records.
	noRecords bool
}

var backendCases = []backendCase{
	{name: "engine", open: func(t testing.TB) Backend { return openEngine(t, "") }},
	{name: "engine/durable",
		open: func(t testing.TB) Backend { return openEngine(t, t.TempDir()) },
		reopen: func(t testing.TB, b Backend) Backend {
			e := b.(*Engine)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			return openEngine(t, e.cfg.Dir)
		}},
	// The proxy waits on the memory store's push notification (Watch) ...
	{name: "proxy/watch", open: func(t testing.TB) Backend { return pxNew(t, memory.New(), ProxyConfig{}) }},
	// ... or, on a store that has none, polls with backoff.
	{name: "proxy/polling", noRecords: true,
		open: func(t testing.TB) Backend { return pxNew(t, pxNoWatch{memory.New()}, ProxyConfig{}) }},
	{name: "proxy/engine", open: func(t testing.TB) Backend { return pxNew(t, StoreOf(openEngine(t, "")), ProxyConfig{}) }},
}

// forEachBackend runs f in a subtest per backend case, on a new backend;
// with records, only on the backends that keep records.
func forEachBackend(t *testing.T, records bool, f func(t *testing.T, b Backend)) {
	for _, bc := range backendCases {
		if records && bc.noRecords {
			continue
		}
		t.Run(bc.name, func(t *testing.T) { f(t, bc.open(t)) })
	}
}

// The store conformance suite on every backend presented as a store
// (StoreOf), with restarts where the backend is durable.
func TestStoreOfConformance(t *testing.T) {
	for _, bc := range backendCases {
		t.Run(bc.name, func(t *testing.T) {
			var mu sync.Mutex
			backends := map[leasehold.Store]Backend{}
			open := func(t testing.TB, b Backend) leasehold.Store {
				s := StoreOf(b)
				mu.Lock()
				backends[s] = b
				mu.Unlock()
				return s
			}
			h := storetest.Harness{Open: func(t testing.TB) leasehold.Store { return open(t, bc.open(t)) }}
			if bc.reopen != nil {
				h.Reopen = func(t testing.TB, s leasehold.Store) leasehold.Store {
					mu.Lock()
					b := backends[s]
					mu.Unlock()
					return open(t, bc.reopen(t, b))
				}
			}
			storetest.Run(t, h)
		})
	}
}

// The records conformance suite on every backend that keeps records.
func TestRecordsConformance(t *testing.T) {
	for _, bc := range backendCases {
		if bc.noRecords {
			continue
		}
		t.Run(bc.name, func(t *testing.T) {
			storetest.RunRecords(t, storetest.RecordsHarness{
				Open: func(t testing.TB) leasehold.RecordStore {
					return StoreOf(bc.open(t)).(leasehold.RecordStore)
				},
				Txn: true,
			})
		})
	}
}

func TestRecordBasics(t *testing.T) {
	forEachBackend(t, true, func(t *testing.T, b Backend) {
		if p, ok := b.(*Proxy); ok && !p.SupportsRecords() {
			t.Fatal("the store keeps records; the proxy says it does not")
		}
		testRecordBasics(t, b.(leasehold.RecordStore))
	})
}

// queued is the answer to one of the waiters queueWaiters starts.
type queued struct {
	i   int
	rec leasehold.Record
	err error
}

// queueWaiters queues n waiters on name, owners w0 to w(n-1), in that
// order: each is in the queue (and then after(i), if set, has returned)
// before the next one starts. Their answers arrive on the channel.
func queueWaiters(t *testing.T, ctx context.Context, b Backend, name string, n int, ttl time.Duration, after func(i int)) <-chan queued {
	t.Helper()
	answers := make(chan queued, n)
	for i := range n {
		go func() {
			req := pxReq(name, fmt.Sprintf("w%d", i), ttl)
			req.Wait = time.Hour
			rec, err := b.Acquire(ctx, req)
			answers <- queued{i, rec, err}
		}()
		servertest.WaitFor(t, fmt.Sprintf("%d waiters", i+1), func() bool { return len(b.Waiters(name)) == i+1 })
		if after != nil {
			after(i)
		}
	}
	return answers
}

// Ten waiters queued in a known order are granted in that order, each by
// the release of the one before, with increasing tokens; the events show
// grants and releases alternating.
func TestFIFO(t *testing.T) {
	forEachBackend(t, false, func(t *testing.T, b Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events := b.Subscribe(ctx, "fifo")
		const name, n = "fifo", 10

		prev, err := b.Acquire(ctx, pxReq(name, "holder", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		answers := queueWaiters(t, ctx, b, name, n, time.Minute, nil)
		ws := b.Waiters(name)
		for i, w := range ws {
			if want := fmt.Sprintf("w%d", i); w.Owner != want {
				t.Fatalf("queue %v, want w0..w9 in order", pxOwners(ws))
			}
		}
		if st := b.Stats(); st.Waiters != n {
			t.Fatalf("Stats.Waiters = %d, want %d", st.Waiters, n)
		}

		for i := range n {
			if err := b.Release(ctx, name, prev.Owner, prev.Token); err != nil {
				t.Fatalf("release %s: %v", prev.Owner, err)
			}
			r := within(t, answers, "w%d not granted after %s released", i, prev.Owner)
			if r.err != nil || r.i != i || r.rec.Owner != fmt.Sprintf("w%d", i) {
				t.Fatalf("after %s released: w%d got (%+v, %v), want w%d granted", prev.Owner, r.i, r.rec, r.err, i)
			}
			if r.rec.Token <= prev.Token {
				t.Fatalf("token %d after %d", r.rec.Token, prev.Token)
			}
			if got := len(b.Waiters(name)); got != n-1-i {
				t.Fatalf("%d waiters after w%d's grant, want %d", got, i, n-1-i)
			}
			prev = r.rec
		}
		if err := b.Release(ctx, name, prev.Owner, prev.Token); err != nil {
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
		if _, err := b.Get(ctx, name); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("Get after all released: %v", err)
		}
	})
}

// A wait ends when its Wait runs out (held by the holder) or its context
// ends (dropped from the queue), on every backend.
func TestWaitEnds(t *testing.T) {
	forEachBackend(t, false, testWaitEnds)
}

func testWaitEnds(t *testing.T, e Backend) {
	ctx := context.Background()
	req := func(owner string, wait time.Duration) AcquireRequest {
		r := pxReq("w", owner, time.Minute)
		r.Wait = wait
		return r
	}
	if _, err := e.Acquire(ctx, req("a", 0)); err != nil {
		t.Fatal(err)
	}
	_, err := e.Acquire(ctx, req("b", 20*time.Millisecond))
	var held *leasehold.HeldError
	if !errors.As(err, &held) || held.Owner != "a" {
		t.Fatalf("wait timeout: %v, want held by a", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := acquireAsync(cctx, e, req("c", time.Hour))
	servertest.WaitFor(t, "c queued", func() bool { return len(e.Waiters("w")) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if n := len(e.Waiters("w")); n != 0 {
		t.Fatalf("%d waiters left after cancel", n)
	}
	if got, _ := e.Get(ctx, "w"); got.Owner != "a" {
		t.Fatalf("holder %q", got.Owner)
	}
}

// Invalid input is refused with an *InvalidError and changes nothing, on
// every backend.
func TestInvalidInput(t *testing.T) {
	forEachBackend(t, false, testInvalidInput)
}

func testInvalidInput(t *testing.T, p Backend) {
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

// Subscribe and Recent report the changes, on every backend.
func TestSubscribe(t *testing.T) {
	forEachBackend(t, false, testSubscribe)
}

func testSubscribe(t *testing.T, p Backend) {
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

// An unknown session is refused, on every backend.
func TestUnknownSession(t *testing.T) {
	forEachBackend(t, false, testUnknownSession)
}

func testUnknownSession(t *testing.T, p Backend) {
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
