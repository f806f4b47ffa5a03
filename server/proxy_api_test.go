package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
	"github.com/leasehold/leasehold/testrig/servertest"
)

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
	servertest.WaitFor(t, "Held counts the live lease", func() bool { return p.Stats().Held == 1 })
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
	errc := acquireAsync(ctx, p, w)
	servertest.WaitFor(t, "w queued", func() bool { return len(p.Waiters("c/h")) == 1 })
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
