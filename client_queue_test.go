package leasehold_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/brokenstore"
)

// A caller that gives up after a failed wait asks the store to remove what
// that wait may have left in its queue (AcquireWait with the ended ctx and
// the same request), so no later release hands the lease to nobody.
func TestAcquireGivesUpCleansQueue(t *testing.T) {
	q := &brokenstore.Lossy{Store: memory.New()}
	a, _ := leasehold.New(q, leasehold.WithOwner("a"))
	b, _ := leasehold.New(q, leasehold.WithOwner("b"))
	if _, err := a.TryAcquire(context.Background(), "job", leasehold.TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.Acquire(ctx, "job", leasehold.TTL(time.Minute), leasehold.OnError(func(error) { cancel() }))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	reqs, ended := q.Calls()
	if len(ended) != 2 || ended[0] || !ended[1] {
		t.Fatalf("AcquireWait calls (ctx ended?): %v, want one live wait, then one with the ended ctx", ended)
	}
	if reqs[0].RequestID == "" || reqs[1].RequestID != reqs[0].RequestID || reqs[1].Owner != "b" {
		t.Fatalf("the clean-up call's request %+v does not match the failed wait's %+v", reqs[1], reqs[0])
	}
}

// A wait that ends with ctx's own error has cleaned up by itself: no
// second call.
func TestAcquireCancelledWaitNoCleanupCall(t *testing.T) {
	q := &cancelQueuer{Store: memory.New()}
	a, _ := leasehold.New(q, leasehold.WithOwner("a"))
	b, _ := leasehold.New(q, leasehold.WithOwner("b"))
	if _, err := a.TryAcquire(context.Background(), "job", leasehold.TTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, "job", leasehold.TTL(time.Minute)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v, want context.DeadlineExceeded", err)
	}
	if n := q.calls.Load(); n != 1 {
		t.Fatalf("AcquireWait called %d times, want 1", n)
	}
}

type cancelQueuer struct {
	leasehold.Store
	calls atomic.Int32
}

func (q *cancelQueuer) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	q.calls.Add(1)
	<-ctx.Done()
	return leasehold.Record{}, ctx.Err()
}
