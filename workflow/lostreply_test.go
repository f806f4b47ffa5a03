package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// lossyLeases grants leases on the real store but loses the reply of the
// first TryAcquire while armed: the grant is made, then the caller's
// context is cancelled and the caller is told only that.
type lossyLeases struct {
	leasehold.Store
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (l *lossyLeases) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if !l.armed.CompareAndSwap(true, false) {
		return l.Store.TryAcquire(ctx, req)
	}
	if _, err := l.Store.TryAcquire(context.WithoutCancel(ctx), req); err != nil {
		return leasehold.Record{}, err
	}
	l.cancel()
	<-ctx.Done()
	return leasehold.Record{}, ctx.Err()
}

// TestLeaseLostReplyResolves: a lease-based transition whose caller gives
// up while the lease is being granted must not leave the instance locked
// for the lease's TTL: asking again with the same request id applies it at
// once (here within LockWait, 1s, against a TTL of 10s).
func TestLeaseLostReplyResolves(t *testing.T) {
	for _, e := range engines(t) {
		for _, s := range []workflow.Strategy{workflow.Lease, workflow.Pessimistic} {
			if s == workflow.Pessimistic {
				if _, rowLocks := e.records.(leasehold.RecordLocker); rowLocks {
					continue // a row lock, not a lease
				}
			}
			t.Run(e.name+"/"+string(s), func(t *testing.T) {
				lossy := &lossyLeases{Store: e.leases}
				w, err := workflow.New(counting(unique("lost"), 4), workflow.Config{Records: e.records, Leases: lossy,
					Strategy: s, LockWait: time.Second, LeaseTTL: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if _, err := w.Create(ctx, "i"); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithCancel(ctx)
				lossy.cancel = cancel
				lossy.armed.Store(true)
				if _, err := w.Transition(cctx, "i", "0", "1", "ann", "r1"); err == nil {
					t.Fatal("the call whose reply was lost succeeded")
				}
				r, err := w.Transition(ctx, "i", "0", "1", "ann", "r1")
				if err != nil || r.Outcome != workflow.Applied || r.Version != 1 {
					t.Fatalf("asked again with the same request id: %+v, %v; want applied", r, err)
				}
				// And nobody else is kept out either.
				r, err = w.Transition(ctx, "i", "1", "2", "bob", "r2")
				if err != nil || r.Outcome != workflow.Applied {
					t.Fatalf("the next transition: %+v, %v", r, err)
				}
			})
		}
	}
}
