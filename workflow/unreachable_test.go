package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/workflow"
)

// downLeases grants the first TryAcquire while armed on the real store and
// then answers it, and every TryAcquire after it, with a lost connection
// until the test brings the store "back" (down false): a store that went
// away (restart, failover) just after a grant.
type downLeases struct {
	leasehold.Store
	armed, down atomic.Bool
}

var errUnreachable = errors.New("postgres: the database system is shutting down (SQLSTATE 57P03)")

func (l *downLeases) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if l.armed.CompareAndSwap(true, false) {
		if _, err := l.Store.TryAcquire(context.WithoutCancel(ctx), req); err != nil {
			return leasehold.Record{}, err
		}
		l.down.Store(true)
		return leasehold.Record{}, errUnreachable
	}
	if l.down.Load() {
		return leasehold.Record{}, errUnreachable
	}
	return l.Store.TryAcquire(ctx, req)
}

// TestLeaseGrantDuringStoreRestartReleased (issue 28, finding 6): a
// Lease-strategy transition whose grant was made as the store went away
// (its answer a lost connection, the release of the grant unheard too)
// must not leave the instance locked for the lease's TTL once the store is
// back: the grant is released as soon as the store answers again, and
// another process's transition applies within its LockWait (10s, against
// a TTL of 60s). Before, the release was tried once, while the store was
// still unreachable, and the other process got ErrLockTimeout.
func TestLeaseGrantDuringStoreRestartReleased(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			def := counting(unique("down"), 4)
			down := &downLeases{Store: e.leases}
			w1, err := workflow.New(def, workflow.Config{Records: e.records, Leases: down, Owner: "p1",
				Strategy: workflow.Lease, LockWait: 300 * time.Millisecond, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			w2, err := workflow.New(def, workflow.Config{Records: e.records, Leases: e.leases, Owner: "p2",
				Strategy: workflow.Lease, LockWait: 10 * time.Second, LeaseTTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := w1.Create(ctx, "i"); err != nil {
				t.Fatal(err)
			}
			down.armed.Store(true)
			if r, err := w1.Transition(ctx, "i", "0", "1", "ann", "r1"); err == nil {
				t.Fatalf("the transition granted as the store went away: %+v, want an error", r)
			}
			down.down.Store(false) // the store is back
			r, err := w2.Transition(ctx, "i", "0", "1", "bob", "r2")
			if err != nil || r.Outcome != workflow.Applied || r.Version != 1 {
				t.Fatalf("the other process's transition: %+v, %v; want applied (the unheard grant released)", r, err)
			}
		})
	}
}
