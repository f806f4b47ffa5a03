package redis_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// TestQueueStaleGrantMessage: a release hands the lease to waiter w while
// w is in a step of its own (a refresh); the grant expires before w reads
// its message, x takes the free lease, and w's step, finding w neither
// holding nor queued, queues it again. The grant message w then reads is
// stale: w must wait on (and be granted after x), not return the lapsed
// grant. It returned it, with a token below x's, and its new entry stayed
// queued, to be handed a grant nobody collected (the conformance suite's
// linearizability check failed on that, 4 histories of 200, under load).
func TestQueueStaleGrantMessage(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "stale-grant"
	holder, other := f.open(), f.open()
	h := f.hold(ctx, holder, name, "h", time.Minute)

	// w refreshes its entry every second; its second step (the first
	// refresh) waits for the gate.
	ws := f.open(redis.WithLiveness(3 * time.Second))
	var steps atomic.Int32
	gate := make(chan struct{})
	ws.BeforeStep(func() {
		if steps.Add(1) == 2 {
			<-gate
		}
	})
	wRes := acquireWait(ctx, ws, leasehold.AcquireRequest{Name: name, Owner: "w", TTL: 200 * time.Millisecond})
	f.waitQueued(ctx, name, 1)
	for deadline := time.Now().Add(20 * time.Second); steps.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(gate)
			t.Fatal("w's refresh did not start within 20s")
		}
	}

	// The release hands the lease to w (its message waits in w's
	// mailbox); x takes it once that grant has expired.
	if err := holder.Release(ctx, name, "h", h.Token); err != nil {
		close(gate)
		t.Fatal(err)
	}
	var x leasehold.Record
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rec, err := other.TryAcquire(ctx, leasehold.AcquireRequest{Name: name, Owner: "x", TTL: time.Minute})
		if err == nil {
			x = rec
			break
		}
		if !errors.Is(err, leasehold.ErrHeld) || time.Now().After(deadline) {
			close(gate)
			t.Fatalf("x: %v", err)
		}
	}
	if x.Token <= h.Token+1 {
		close(gate)
		t.Fatalf("x got token %d; want one above w's handed grant (h had %d)", x.Token, h.Token)
	}

	// w's refresh runs now: x holds the lease, so it queues w again.
	close(gate)
	f.waitQueued(ctx, name, 1)
	if err := other.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	w, _ := grantedBy(t, wRes, "w", 20*time.Second)
	if w.Token <= x.Token {
		t.Fatalf("w returned token %d, below x's %d: the stale grant handed before x's", w.Token, x.Token)
	}
	if n := ws.StaleGrants(); n != 1 {
		t.Errorf("stale grant messages set aside: %d, want 1", n)
	}
	f.releaseLast(ctx, ws, name, "w", w.Token)
}
