package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/storetest"
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
		pxWaitUntil(t, fmt.Sprintf("%d waiters", i+1), func() bool { return len(b.Waiters(name)) == i+1 })
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
			var r queued
			select {
			case r = <-answers:
			case <-time.After(pxTimeout):
				t.Fatalf("w%d not granted after %s released", i, prev.Owner)
			}
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
