package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// Proxies in front of a store that queues waiters itself (a
// leasehold.Queuer) wait in that store's queue. Here the store is an
// Engine in this process (StoreOf), and two proxies in front of it stand
// for two `leasehold serve --store` instances.

// pxShared returns an engine and n proxies in front of it (closing one
// leaves the engine open for the others).
func pxShared(t *testing.T, n int) (*Engine, []*Proxy) {
	t.Helper()
	e := openEngine(t, "")
	var ps []*Proxy
	for range n {
		ps = append(ps, pxNew(t, pxNoClose{StoreOf(e).(backendRecordStore)}, ProxyConfig{}))
	}
	return e, ps
}

// pxNoClose is the engine as a store, which Close leaves open.
type pxNoClose struct{ backendRecordStore }

func (pxNoClose) Close() error { return nil }

// pxWaiting is how many waiters the proxies list on name, all together.
func pxWaiting(ps []*Proxy, name string) int {
	n := 0
	for _, p := range ps {
		n += len(p.Waiters(name))
	}
	return n
}

// Waiters alternate between two proxies, each queued (as its proxy lists
// it) before the next one starts: they are granted in exactly that order
// across the proxies, each by the release of the one before, with
// increasing tokens; the engine behind them held one queue in that order;
// each proxy reports its own waiters' queued and granted events (the
// grants as handoffs) and its waiter count. With a queue per proxy (each
// proxy's head trying the store), the two heads race at every release.
func TestProxyFIFOAcrossProxies(t *testing.T) {
	e, ps := pxShared(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name, n = "fifo/across", 8
	var events [2]<-chan Event
	for i, p := range ps {
		events[i] = p.Subscribe(ctx, name)
	}
	prev := pxAcquire(t, ps[0], pxReq(name, "holder", time.Minute))

	answers := make(chan queued, n)
	var want []string
	for i := range n {
		owner := fmt.Sprintf("w%d-%c", i, 'a'+i%2)
		want = append(want, owner)
		go func() {
			req := pxReq(name, owner, time.Minute)
			req.Wait = time.Hour
			rec, err := ps[i%2].Acquire(ctx, req)
			answers <- queued{i, rec, err}
		}()
		servertest.WaitFor(t, fmt.Sprintf("%s queued", owner), func() bool { return pxWaiting(ps, name) == i+1 })
	}
	engineQueue := pxOwners(e.Waiters(name))
	for i, p := range ps {
		var mine []string
		for j := i; j < n; j += 2 {
			mine = append(mine, want[j])
		}
		if got := pxOwners(p.Waiters(name)); !slices.Equal(got, mine) {
			t.Errorf("proxy %d lists waiters %v, want %v", i, got, mine)
		}
		if got := p.Stats().Waiters; got != len(mine) {
			t.Errorf("proxy %d: Stats.Waiters = %d, want %d", i, got, len(mine))
		}
	}

	// Each holder releases through the proxy it acquired through.
	proxyOf := func(owner string) *Proxy {
		if i := slices.Index(want, owner); i >= 0 {
			return ps[i%2]
		}
		return ps[0]
	}
	var got []string
	for range n + 1 {
		if err := proxyOf(prev.Owner).Release(ctx, name, prev.Owner, prev.Token); err != nil {
			t.Fatalf("release %s through its proxy: %v", prev.Owner, err)
		}
		if len(got) == n {
			break
		}
		r := within(t, answers, "nobody granted after %s released", prev.Owner)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		if r.rec.Token <= prev.Token {
			t.Fatalf("%s granted token %d after token %d", r.rec.Owner, r.rec.Token, prev.Token)
		}
		got = append(got, r.rec.Owner)
		prev = r.rec
	}
	if !slices.Equal(got, want) {
		t.Errorf("grants in order %v, want the arrival order %v", got, want)
	}
	if !slices.Equal(engineQueue, want) {
		t.Errorf("the engine's queue was %v, want %v", engineQueue, want)
	}
	if t.Failed() {
		return
	}
	for i, p := range ps {
		if n := p.Stats().Waiters; n != 0 {
			t.Errorf("proxy %d: %d waiters left", i, n)
		}
		// Each proxy's events: its waiters queued in order, then granted
		// in order, each grant a handoff.
		var mine []string
		for j := i; j < n; j += 2 {
			mine = append(mine, want[j])
		}
		var q, g []string
		for len(g) < len(mine) {
			ev := pxNextOf(t, events[i], EventQueued, EventGranted, EventDequeued)
			switch {
			case ev.Type == EventDequeued:
				t.Fatalf("proxy %d: %s dequeued", i, ev.Owner)
			case ev.Type == EventQueued:
				q = append(q, ev.Owner)
			case ev.Owner != "holder":
				g = append(g, ev.Owner)
				if ev.Handoff <= 0 || ev.Handoff > pxTimeout {
					t.Errorf("proxy %d: grant to %s with handoff %s", i, ev.Owner, ev.Handoff)
				}
			}
		}
		if !slices.Equal(q, mine) || !slices.Equal(g, mine) {
			t.Errorf("proxy %d: queued %v and granted %v, want %v for both", i, q, g, mine)
		}
	}
}

// A waiter in the store's queue leaves it when its Wait runs out (told
// the holder), its context ends, its session ends, or its proxy closes;
// each time neither proxy nor engine lists it afterwards, and the holder
// keeps the lease.
func TestProxyFIFOWaitEnds(t *testing.T) {
	e, ps := pxShared(t, 2)
	a, b := ps[0], ps[1]
	ctx := context.Background()
	const name = "fifo/ends"
	holder := pxAcquire(t, a, pxReq(name, "holder", time.Minute))
	left := func(what string) {
		t.Helper()
		servertest.WaitFor(t, what+": nobody queued", func() bool {
			return len(e.Waiters(name)) == 0 && pxWaiting(ps, name) == 0
		})
		if got, err := e.Get(ctx, name); err != nil || got.Token != holder.Token {
			t.Fatalf("%s: lease %+v, %v; want the holder's", what, got, err)
		}
	}

	// The Wait runs out: a *HeldError naming the holder.
	req := pxReq(name, "timed", time.Minute)
	req.Wait = 300 * time.Millisecond
	_, err := b.Acquire(ctx, req)
	var held *leasehold.HeldError
	if !errors.As(err, &held) || held.Owner != "holder" || held.Token != holder.Token {
		t.Fatalf("a wait that ran out: %v, want held by the holder", err)
	}
	left("wait ran out")

	// The context ends.
	cctx, cancel := context.WithCancel(ctx)
	req = pxReq(name, "cancelled", time.Minute)
	req.Wait = time.Hour
	errc := acquireAsync(cctx, b, req)
	servertest.WaitFor(t, "cancelled queued", func() bool { return len(e.Waiters(name)) == 1 && len(b.Waiters(name)) == 1 })
	cancel()
	if err := within(t, errc, "cancelled wait did not end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	left("context ended")

	// The session ends.
	s := pxOpenSession(t, b, time.Minute)
	req = pxReq(name, "session", 0)
	req.Session, req.Wait = s.ID, time.Hour
	errc = acquireAsync(ctx, b, req)
	servertest.WaitFor(t, "session waiter queued", func() bool { return len(e.Waiters(name)) == 1 && len(b.Waiters(name)) == 1 })
	if err := b.CloseSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := within(t, errc, "session waiter not dropped"); !errors.Is(err, ErrNoSession) {
		t.Fatalf("waiter of a closed session: %v", err)
	}
	left("session ended")

	// The proxy closes (the other one goes on).
	req = pxReq(name, "closing", time.Minute)
	req.Wait = time.Hour
	errc = acquireAsync(ctx, b, req)
	servertest.WaitFor(t, "closing queued", func() bool { return len(e.Waiters(name)) == 1 && len(b.Waiters(name)) == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, errc, "waiter of a closed proxy not ended"); !errors.Is(err, leasehold.ErrClosed) {
		t.Fatalf("waiter of a closed proxy: %v", err)
	}
	left("proxy closed")

	// A try-once acquire does not queue, and is refused while held.
	if _, err := a.Acquire(ctx, pxReq(name, "once", time.Minute)); !errors.As(err, &held) || held.Owner != "holder" {
		t.Fatalf("try-once acquire: %v", err)
	}
	left("try-once acquire")
}

// A grant made through the store's queue carries its holder proof: a
// waiter that acquires (wait_ms) through one server gets the secret, and
// another server with the same holder key accepts it for the release,
// which hands the lease on to the next waiter in line.
func TestProxyFIFOHolderProofs(t *testing.T) {
	_, ps := pxShared(t, 2)
	proofs := RandomHolderProofs()
	proofs.Required = true
	var urls []string
	for _, p := range ps {
		srv := httptest.NewServer(NewHandler(p, HandlerOptions{Holders: proofs}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	post := func(url, path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	const path = "/v1/leases/fifo/proof/"
	st, h := post(urls[0], path+"acquire", `{"owner":"holder","ttl_ms":60000}`)
	if st != 200 {
		t.Fatalf("holder's acquire: %d %v", st, h)
	}
	type answer struct {
		st int
		m  map[string]any
	}
	got := make(chan answer, 1)
	go func() {
		st, m := post(urls[1], path+"acquire", `{"owner":"waiter","ttl_ms":60000,"wait_ms":60000}`)
		got <- answer{st, m}
	}()
	servertest.WaitFor(t, "waiter queued", func() bool { return len(ps[1].Waiters("fifo/proof")) == 1 })
	if st, m := post(urls[1], path+"release", fmt.Sprintf(`{"owner":"holder","token":%v,"secret":%q}`, h["token"], h["secret"])); st != 204 {
		t.Fatalf("holder's release through the other server: %d %v", st, m)
	}
	w := within(t, got, "waiter not granted")
	tok := uint64(w.m["token"].(float64))
	if w.st != 200 || w.m["secret"] != proofs.Secret("fifo/proof", "waiter", tok) {
		t.Fatalf("waiter's grant: %d %v; want its secret", w.st, w.m)
	}
	if st, m := post(urls[0], path+"release", fmt.Sprintf(`{"owner":"waiter","token":%d}`, tok)); st != 403 {
		t.Fatalf("release without the secret: %d %v, want 403", st, m)
	}
	if st, m := post(urls[0], path+"release", fmt.Sprintf(`{"owner":"waiter","token":%d,"secret":%q}`, tok, w.m["secret"])); st != 204 {
		t.Fatalf("waiter's release with its secret: %d %v", st, m)
	}
}

// pxLateQueuer is a queuing store (the engine) whose AcquireWait does not
// heed its context: it returns the grant even after the wait was ended,
// as a store can when a grant races with the end. Its first failFirst
// calls fail at once with a transient error. It does not tell when a
// waiter joined its queue (as the stores of other packages do not).
type pxLateQueuer struct {
	leasehold.Store
	mu        sync.Mutex
	calls     []string // request ids
	failFirst int
}

func (s *pxLateQueuer) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	s.mu.Lock()
	s.calls = append(s.calls, req.RequestID)
	fail := len(s.calls) <= s.failFirst
	s.mu.Unlock()
	if fail {
		return leasehold.Record{}, errors.New("connection reset (injected)")
	}
	return s.Store.(leasehold.Queuer).AcquireWait(context.WithoutCancel(ctx), req)
}

func (s *pxLateQueuer) requestIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// A grant that the store makes as the wait ends is released, not kept:
// when the waiter's session ended, and when its caller went away. A
// transient error of the store wait is retried with the same request id.
func TestProxyFIFOGrantRacingEnd(t *testing.T) {
	e := openEngine(t, "")
	ctx := context.Background()
	for _, end := range []string{"session", "caller"} {
		t.Run(end, func(t *testing.T) {
			store := &pxLateQueuer{Store: pxNoClose{StoreOf(e).(backendRecordStore)}, failFirst: 1}
			p := pxNew(t, store, ProxyConfig{})
			name := "fifo/racing/" + end
			events := p.Subscribe(t.Context(), name)
			holder := pxAcquire(t, p, pxReq(name, "holder", time.Minute))

			req := pxReq(name, "waiter", time.Minute)
			req.RequestID, req.Wait = "waiter-req-1", time.Hour
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var sess Session
			if end == "session" {
				sess = pxOpenSession(t, p, time.Minute)
				req.Session = sess.ID
			}
			errc := acquireAsync(cctx, p, req)
			servertest.WaitFor(t, "waiter in the engine's queue", func() bool { return len(e.Waiters(name)) == 1 })
			if ids := store.requestIDs(); len(ids) != 2 || ids[0] != req.RequestID || ids[1] != req.RequestID {
				t.Fatalf("store waits with request ids %v; want two (a failed one, retried) with %q", ids, req.RequestID)
			}
			// End the wait: the store does not notice, and grants the
			// waiter when the holder releases.
			want := context.Canceled
			if end == "session" {
				want = ErrNoSession
				if err := p.CloseSession(ctx, sess.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				cancel()
			}
			if err := p.Release(ctx, name, holder.Owner, holder.Token); err != nil {
				t.Fatal(err)
			}
			if err := within(t, errc, "wait not ended"); !errors.Is(err, want) {
				t.Fatalf("wait ended by its %s: %v, want %v", end, err, want)
			}
			// The raced grant was released: the lease is free.
			servertest.WaitFor(t, "the raced grant released", func() bool {
				_, err := e.Get(ctx, name)
				return errors.Is(err, leasehold.ErrNotFound)
			})
			for _, typ := range []EventType{EventGranted, EventReleased} {
				if ev := pxNextOf(t, events, EventGranted, EventReleased); ev.Type != typ || ev.Owner != "holder" {
					t.Fatalf("event %s %s, want %s holder", ev.Type, ev.Owner, typ)
				}
			}
			ev := pxNextOf(t, events, EventGranted, EventReleased)
			rel := pxNextOf(t, events, EventGranted, EventReleased)
			if ev.Type != EventGranted || ev.Owner != "waiter" || rel.Type != EventReleased || rel.Owner != "waiter" || rel.Token != ev.Token {
				t.Fatalf("events %s %s %d, %s %s %d; want the waiter's grant and its release", ev.Type, ev.Owner, ev.Token, rel.Type, rel.Owner, rel.Token)
			}
			if n := len(p.Waiters(name)) + p.Stats().Waiters; n != 0 {
				t.Fatalf("waiters left: %v, stats %d", p.Waiters(name), p.Stats().Waiters)
			}
		})
	}
}
