package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/server"
	"github.com/leasehold/leasehold/testrig/brokenstore"
)

// handle is one "connection" to a shared in-process Queuer: closing it
// ends its waits (as a dropped connection would) and leaves the shared
// store open.
type handle struct {
	leasehold.Store
	q      leasehold.Queuer
	ctx    context.Context
	cancel context.CancelFunc
}

func newHandle(s leasehold.Store) *handle {
	ctx, cancel := context.WithCancel(context.Background())
	return &handle{Store: s, q: s.(leasehold.Queuer), ctx: ctx, cancel: cancel}
}

func (h *handle) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if h.ctx.Err() != nil {
		return leasehold.Record{}, leasehold.ErrClosed
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(h.ctx, stop)()
	rec, err := h.q.AcquireWait(ctx, req)
	if err != nil && h.ctx.Err() != nil {
		err = leasehold.ErrClosed
	}
	return rec, err
}

func (h *handle) Close() error { h.cancel(); return nil }

// sharedHarness opens handles on one store.
func sharedHarness(t *testing.T, s leasehold.Store) Harness {
	t.Cleanup(func() { s.Close() })
	return Harness{Open: func(testing.TB) leasehold.Store { return newHandle(s) }}
}

// openEngine returns an in-memory lease server engine.
func openEngine(t *testing.T) *server.Engine {
	e, err := server.OpenEngine(server.EngineConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestQueueChecksServer: the lease server's engine queues in FIFO order;
// every queue check passes on it, told of its queue by the engine
// (Queued) and with the store-agnostic settle time.
func TestQueueChecksServer(t *testing.T) {
	for _, mode := range []string{"queued-hook", "settle"} {
		t.Run(mode, func(t *testing.T) {
			e := openEngine(t)
			h := sharedHarness(t, server.StoreOf(e))
			if mode == "queued-hook" {
				h.Queued = func(_ context.Context, _ leasehold.Store, name, owner string) (bool, error) {
					return slices.ContainsFunc(e.Waiters(name), func(w server.Waiter) bool { return w.Owner == owner }), nil
				}
			}
			for _, c := range queueChecks {
				t.Run(c.name, func(t *testing.T) {
					if err := CheckQueue(t, h, c.name); err != nil {
						t.Error(err)
					}
				})
			}
		})
	}
}

// TestQueueChecksSkipped: a store that does not queue (memory) skips the
// queue subtests, and CheckQueue says why.
func TestQueueChecksSkipped(t *testing.T) {
	h := Harness{Open: func(testing.TB) leasehold.Store { return memory.New() }}
	for _, c := range queueChecks {
		if err := CheckQueue(t, h, c.name); err == nil || err.Error() != errNotQueuer.Error() {
			t.Errorf("%s on the memory store: %v, want %q", c.name, err, errNotQueuer)
		}
		t.Run(c.name, func(t *testing.T) { testQueue(c.fn)(t, h) })
	}
}

// TestQueueChecksCatchBrokenQueues: the correct in-memory queue passes
// every queue check; each broken queue fails at least the check aimed at
// its bug.
func TestQueueChecksCatchBrokenQueues(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		h := sharedHarness(t, brokenstore.NewQueuer(0))
		for _, c := range queueChecks {
			if err := CheckQueue(t, h, c.name); err != nil {
				t.Errorf("%s on a correct queue: %v", c.name, err)
			}
		}
	})
	want := map[brokenstore.Bug]string{
		brokenstore.QueueLIFO:          "QueueFIFO",
		brokenstore.QueueOvertake:      "QueueNoOvertake",
		brokenstore.QueueOrphan:        "QueueCancelLeaves",
		brokenstore.WaitGrantWhileHeld: "QueueFIFO",
	}
	for _, bug := range brokenstore.QueueBugs {
		t.Run(bug.String(), func(t *testing.T) {
			q := brokenstore.NewQueuer(bug)
			h := sharedHarness(t, q)
			h.Queued = func(_ context.Context, _ leasehold.Store, name, owner string) (bool, error) {
				return q.Queued(name, owner), nil
			}
			err := CheckQueue(t, h, want[bug])
			if err == nil {
				t.Fatalf("%s passed on a store with bug %s", want[bug], bug)
			}
			t.Logf("caught: %v", err)
		})
	}
}

// TestHistoriesWithWaits: the linearizability workload of a Queuer mixes
// AcquireWaits in, and the model accepts the histories of correct queues
// (the lease server's engine, the in-memory reference queue).
func TestHistoriesWithWaits(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) leasehold.Store
	}{
		{"server", func(t *testing.T) leasehold.Store { return server.StoreOf(openEngine(t)) }},
		{"reference", func(t *testing.T) leasehold.Store { return brokenstore.NewQueuer(0) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.open(t)
			defer s.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res := CheckHistories(ctx, s, HistoryConfig{Histories: 60})
			t.Log(res)
			if !res.Passed() {
				t.Errorf("not linearizable: %s\n%s", res, res.FirstBad)
			}
			if res.Waits == 0 || res.WaitGrants == 0 || res.WaitGrants == res.Waits {
				t.Errorf("workload: %d waits, %d granted; want some granted, some ended by their context", res.Waits, res.WaitGrants)
			}
		})
	}
}

// TestBrokenQueuersAreCaught: the queue bugs that break exclusion or leave
// a holder nobody knows of are found by the linearizability check in
// every run.
func TestBrokenQueuersAreCaught(t *testing.T) {
	for _, bug := range []brokenstore.Bug{brokenstore.WaitGrantWhileHeld, brokenstore.QueueOrphan} {
		expectCaught(t, bug, func(ctx context.Context) (int, fmt.Stringer) {
			// The in-memory queue frees a grant that raced with the end of
			// a wait before AcquireWait returns: no cleanup time.
			res := CheckHistories(ctx, brokenstore.NewQueuer(bug), HistoryConfig{Histories: 20, WaitCleanup: -1})
			return res.Illegal, res
		})
	}
}
