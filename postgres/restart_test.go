package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// grant is one lease some party got, with the times (on this process's
// clock) around it.
type grant struct {
	who      string
	token    uint64
	got      time.Time // TryAcquire/Acquire returned
	released time.Time // Release was called (zero if never)
}

// contend tries to take name every 50ms until it gets it or ctx ends, and
// then keeps it (without keepalive; its TTL is long).
func contend(ctx context.Context, s leasehold.Store, name string, out chan<- grant) {
	for ctx.Err() == nil {
		rec, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "contender", TTL: time.Minute})
		if err == nil {
			out <- grant{who: "contender", token: rec.Token, got: time.Now()}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	close(out)
}

// restart kills the server (SIGKILL; enginetest also kills the backends,
// which run in process groups of their own), keeps it down for down, and
// starts it again on the same data.
func restart(t *testing.T, srv *enginetest.Server, down time.Duration) {
	srv.Kill()
	time.Sleep(down)
	srv.Start()
}

// TestServerRestart kills the PostgreSQL server (SIGKILL) under held
// leases and blocked waiters, and restarts it on the same data, at once and
// after 3s (longer than the 2s leases). Tokens never go back, a holder
// either keeps its lease (renewals confirmed in time) or reports it lost
// before anyone else gets it, and waiters recover.
func TestServerRestart(t *testing.T) {
	for _, down := range []time.Duration{0, 3 * time.Second} {
		t.Run("down="+down.String(), func(t *testing.T) { testRestart(t, down) })
	}
}

func testRestart(t *testing.T, down time.Duration) {
	srv := enginetest.StartPostgres(t)
	u := withParam(withParam(srv.PostgresURL(), "connect_timeout", "5"), "table", "restart_leases")
	ctx := ctxFor(t, 5*time.Minute)
	// Three Stores, three pools and listeners: as three processes would.
	holders, waiters, others := open(t, u), open(t, u), open(t, u)
	defer holders.Close()
	defer waiters.Close()
	defer others.Close()

	client := func(s leasehold.Store, owner string) *leasehold.Client {
		c, err := leasehold.New(s, leasehold.WithOwner(owner))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// A history of grants before the crash, so the counter is well above 1.
	var before uint64
	for i := 0; i < 5; i++ {
		rec, err := others.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r/counter", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		before = rec.Token
		if err := others.Release(ctx, "r/counter", "o", rec.Token); err != nil {
			t.Fatal(err)
		}
	}
	short, err := client(holders, "short").TryAcquire(ctx, "r/short", leasehold.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	long, err := client(holders, "long").TryAcquire(ctx, "r/long", leasehold.TTL(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	gate, err := client(holders, "gate").TryAcquire(ctx, "r/gate", leasehold.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// Waiters block in Acquire on r/gate; each holds it briefly, then lets go.
	const nWaiters = 3
	var mu sync.Mutex
	var waited []grant
	var werrs []error
	blocked := make(chan struct{}, nWaiters)
	var wg sync.WaitGroup
	for i := 0; i < nWaiters; i++ {
		c := client(waiters, fmt.Sprintf("waiter%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var once sync.Once
			l, err := c.Acquire(ctx, "r/gate", leasehold.TTL(2*time.Second),
				leasehold.OnWait(func(*leasehold.HeldError) { once.Do(func() { blocked <- struct{}{} }) }))
			if err != nil {
				mu.Lock()
				werrs = append(werrs, fmt.Errorf("%s: %w", c.Owner(), err))
				mu.Unlock()
				return
			}
			g := grant{who: c.Owner(), token: l.Token(), got: time.Now()}
			time.Sleep(100 * time.Millisecond)
			g.released = time.Now()
			err = l.Release(ctx)
			mu.Lock()
			waited = append(waited, g)
			if err != nil {
				werrs = append(werrs, fmt.Errorf("%s: release: %w", c.Owner(), err))
			}
			mu.Unlock()
		}()
	}
	for i := 0; i < nWaiters; i++ {
		select {
		case <-blocked:
		case <-time.After(time.Minute):
			t.Fatal("waiters did not block on the held lease")
		}
	}
	// Contenders poll for the holders' leases throughout.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	shortTaken, longTaken := make(chan grant, 1), make(chan grant, 1)
	go contend(cctx, others, "r/short", shortTaken)
	go contend(cctx, others, "r/long", longTaken)

	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	restart(t, srv, down)
	up := time.Now()
	t.Logf("server down for %s", up.Sub(killed).Round(time.Millisecond))

	// Tokens never go back.
	rec, err := others.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r/counter", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire after restart: %v", err)
	}
	if rec.Token <= before {
		t.Errorf("token after restart %d, want > %d", rec.Token, before)
	}

	// The gate holder lets go (if it still holds it); the waiters then get
	// the lease one at a time.
	// Its pooled connections all died with the server; the Store resets the
	// pool on the first failure and retries, so the release goes through.
	if gate.Err() == nil {
		if err := gate.Release(ctx); err != nil && !errors.Is(err, leasehold.ErrLost) {
			t.Errorf("gate release after restart: %v", err)
		}
	} else {
		t.Logf("gate lease lost during the outage: %v", gate.Err())
	}
	wg.Wait()
	for _, err := range werrs {
		t.Error(err)
	}
	sort.Slice(waited, func(i, j int) bool { return waited[i].token < waited[j].token })
	if len(waited) != nWaiters {
		t.Fatalf("%d of %d waiters got the lease", len(waited), nWaiters)
	}
	for i, g := range waited {
		if g.token <= gate.Token() {
			t.Errorf("%s got token %d, not above the gate's %d", g.who, g.token, gate.Token())
		}
		if i > 0 && g.got.Before(waited[i-1].released) {
			t.Errorf("%s (token %d) got the lease before %s (token %d) released it", g.who, g.token, waited[i-1].who, waited[i-1].token)
		}
	}
	t.Logf("waiters recovered %s after the server came back", time.Since(up).Round(time.Millisecond))

	// The long lease outlives the outage: a renewal sent after the restart
	// (deadline = send time + 15s - 1% - 5ms) confirms it, and nobody else
	// got it meanwhile.
	waitFor(t, time.Minute, func() bool { return !long.Deadline().Before(up.Add(15*time.Second - 155*time.Millisecond)) })
	if err := long.Err(); err != nil {
		t.Errorf("15s lease lost during an outage of %s: %v", down, err)
	}
	if got, err := others.Get(ctx, "r/long"); err != nil || got.Owner != "long" || got.Token != long.Token() {
		t.Errorf("r/long after restart = %+v, %v; want the long holder's", got, err)
	}

	// The short lease: kept, or lost before anyone else got it.
	select {
	case <-short.Done():
	case <-time.After(5 * time.Second):
	}
	ccancel()
	if err := short.Err(); err == nil {
		if down > 2*time.Second {
			t.Errorf("2s lease still held after the server was down for %s", down)
		}
		if g, ok := <-shortTaken; ok {
			t.Errorf("contender got r/short (token %d) while its holder still holds it", g.token)
		}
		if got, err := others.Get(ctx, "r/short"); err != nil || got.Owner != "short" || got.Token != short.Token() {
			t.Errorf("r/short after restart = %+v, %v; want the short holder's", got, err)
		}
		t.Log("short lease kept through the outage")
	} else {
		if !errors.Is(err, leasehold.ErrLost) {
			t.Errorf("short lease ended with %v, want ErrLost", err)
		}
		if g, ok := <-shortTaken; ok {
			t.Logf("contender got r/short (token %d) %s after its holder's deadline",
				g.token, g.got.Sub(short.Deadline()).Round(time.Millisecond))
			if g.got.Before(short.Deadline()) {
				t.Errorf("contender got r/short at %s, before its holder's deadline %s",
					g.got.Format(time.StampMicro), short.Deadline().Format(time.StampMicro))
			}
			if g.token <= short.Token() {
				t.Errorf("contender's token %d not above the lost holder's %d", g.token, short.Token())
			}
		}
		t.Logf("short lease lost during the outage: %v", err)
	}
	if g, ok := <-longTaken; ok {
		t.Errorf("contender got r/long (token %d) from a live holder", g.token)
	}

	// The listener of the waiters' Store reconnected and works: a release
	// through another Store reaches a new watcher.
	waitFor(t, time.Minute, func() bool { return postgres.Listens(waiters) >= 2 })
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	ch, err := waiters.Watch(wctx, "r/notify")
	if err != nil {
		t.Fatal(err)
	}
	drain(ch)
	n, err := others.TryAcquire(ctx, leasehold.AcquireRequest{Name: "r/notify", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := others.Release(ctx, "r/notify", "o", n.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Error("no notification through the reconnected listener")
	}
	long.Release(ctx)
	t.Logf("operations that met a dead pooled connection: holders %d, waiters %d, others %d",
		postgres.LostConnections(holders), postgres.LostConnections(waiters), postgres.LostConnections(others))
}
