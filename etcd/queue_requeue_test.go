package etcd

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
)

// A head whose session ends (its keepalive lapsed under load, or another
// waiter's abandon dropped it) queues again; if a release hands the lease
// to its old entry before that enqueue is applied, the enqueue still puts
// a new entry and then finds the grant handed to it. That new entry must
// be deleted with the grant: the release deleted only the old one. Left
// behind, it headed the queue (on the store's live session): every
// TryAcquire of the free lease was refused "queued ahead: w", and the
// waiter's own later release handed the lease to it, a grant nobody held.
// The conformance suite found it under load (illegal histories of
// TestConformance/Linearizable).
func TestQueueRequeueHandedLeavesNoEntry(t *testing.T) {
	handOffFor(t)
	u := queueURL(t)
	holder := openStore(t, u)
	ws := openStore(t, u)
	ctx := context.Background()
	rec, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The first enqueue goes through; the second (the requeue after the
	// session ended) is held back until the handoff is done.
	var mu sync.Mutex
	calls := 0
	entered := make(chan struct{})
	proceed := make(chan struct{})
	ws.enqueueHook = func(ctx context.Context, commit func(context.Context) (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n == 2 {
			close(entered)
			select {
			case <-proceed:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return commit(ctx)
	}
	done := waitAsW(t, ctx, ws, 10*time.Second, "the waiter did not queue")
	ws.qmu.Lock()
	se := ws.sess
	ws.qmu.Unlock()
	// The keepalive ends; the entry lives on in etcd until its lease
	// expires (the liveness window), so a release can still hand it the
	// lease.
	se.cancel()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not queue again after its session ended")
	}
	// The release (from the waiter's store, which knows a waiter is
	// queued) hands the lease to the old entry and deletes it.
	if err := ws.Release(ctx, "n", "h", rec.Token); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	w := grantedToW(t, done)
	if q := queued(t, ws, "n"); len(q) != 0 {
		t.Errorf("queue of n after the grant to w: %v, want empty", q)
	}
	if err := ws.Release(ctx, "n", "w", w.Token); err != nil {
		t.Fatal(err)
	}
	got, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "x", TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquire of the free lease after w's release: %v, want a grant (no one waits)", err)
	}
	if got.Owner != "x" {
		t.Fatalf("TryAcquire granted %+v", got)
	}
}
