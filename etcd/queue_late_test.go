package etcd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
)

// An enqueue whose reply never came may be applied by etcd later, after
// the waiter has queued again, been granted the lease and returned (an
// overloaded etcd answers "request timed out" for a proposal it still
// commits). Such a late enqueue must not leave an entry behind: nobody
// waits for it, yet it would head the queue and refuse every TryAcquire
// (naming the gone waiter) for as long as the store's queue session lives.
// The conformance suite found it on a loaded machine: a TryAcquire refused
// "queued ahead: c1" by c1's own entry after c1's wait had been granted.
func TestQueueLateEnqueueLeavesNoEntry(t *testing.T) {
	u := queueURL(t)
	holder := openStore(t, u)
	ws := openStore(t, u)
	ctx := context.Background()
	rec, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var late func(context.Context) (*clientv3.TxnResponse, error)
	ws.enqueueHook = func(ctx context.Context, commit func(context.Context) (*clientv3.TxnResponse, error)) (*clientv3.TxnResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if late == nil {
			late = commit // not sent now: etcd applies it later
			return nil, errors.New("etcdserver: request timed out")
		}
		return commit(ctx)
	}
	done := waitAsW(t, ctx, ws, 20*time.Second, "the waiter did not queue again after the lost reply")
	if err := holder.Release(ctx, "n", "h", rec.Token); err != nil {
		t.Fatal(err)
	}
	w := grantedToW(t, done)
	// Another process of the same store keeps the queue session alive, as
	// a busy store's other waiters would.
	other, ocancel := context.WithCancel(ctx)
	defer ocancel()
	go func() {
		_, _ = ws.AcquireWait(other, leasehold.AcquireRequest{Name: "busy", Owner: "b", TTL: 10 * time.Second})
	}()
	mu.Lock()
	send := late
	mu.Unlock()
	if _, err := send(ctx); err != nil { // etcd applies the lost enqueue now
		t.Fatal(err)
	}
	if q := queued(t, ws, "n"); len(q) != 0 {
		t.Fatalf("queue of n after the late enqueue: %v, want empty (w was granted and returned)", q)
	}
	if err := ws.Release(ctx, "n", "w", w.Token); err != nil {
		t.Fatal(err)
	}
	got, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "x", TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquire of the free lease: %v, want a grant (no one waits)", err)
	}
	if got.Owner != "x" {
		t.Fatalf("TryAcquire granted %+v", got)
	}
}
