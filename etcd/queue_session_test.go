package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
)

// A waiter whose session ended locally while its entry still exists in
// etcd queues again on a new session instead of looking and acquiring in
// a loop, and is granted the lease when it is released.
func TestQueueDeadSessionNoSpin(t *testing.T) {
	u := queueURL(t)
	holder := openStore(t, u)
	ws := openStore(t, u, WithQueueLiveness(3*time.Second))
	ctx := context.Background()
	rec, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "n", Owner: "h", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var acq, wk atomic.Int64
	ws.waitHook = func(_ leasehold.AcquireRequest, wakes, acquires int) {
		acq.Store(int64(acquires))
		wk.Store(int64(wakes))
	}
	done := waitAsW(t, ctx, ws, 10*time.Second, "the waiter did not queue")
	ws.qmu.Lock()
	se := ws.sess
	ws.qmu.Unlock()
	se.cancel() // the keepalive ends; the entry lives on in etcd until its lease expires
	time.Sleep(3 * time.Second)
	if q := queued(t, ws, "n"); !slices.Equal(q, []string{"w"}) {
		t.Fatalf("queue after the session ended: %v, want [w]", q)
	}
	if err := holder.Release(ctx, "n", "h", rec.Token); err != nil {
		t.Fatal(err)
	}
	grantedToW(t, done)
	if a, k := acq.Load(), wk.Load(); a+k >= 20 {
		t.Fatalf("the waiter sent %d acquire Txns and woke %d times; want fewer than 20 in all", a, k)
	}
}

// AcquireWait called with an ended ctx removes the entry that an earlier
// call with the same owner and request id left behind, and releases a
// grant made to it, then returns ctx's error.
func TestQueueEndedCtxCleansUp(t *testing.T) {
	u := queueURL(t)
	s := openStore(t, u)
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()

	// Bad input is refused first.
	if _, err := s.AcquireWait(ended, leasehold.AcquireRequest{Name: "", Owner: "o", RequestID: "r", TTL: time.Second}); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("bad input with an ended ctx: %v, want a validation error", err)
	}

	// An entry left behind by owner o, request r, and one of another request.
	lr, err := s.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	put := func(name, owner, rid string) {
		w := &waiter{req: leasehold.AcquireRequest{Owner: owner, RequestID: rid, TTL: 10 * time.Second}}
		key := s.queuePrefix(name) + fmt.Sprintf("%016x/", int64(lr.ID)) + "0123456789abcdef"[:8] + rid
		if _, err := s.cli.Put(ctx, key, w.entryValue(), clientv3.WithLease(lr.ID)); err != nil {
			t.Fatal(err)
		}
	}
	put("n", "o", "r")
	put("n", "o", "other")
	if _, err := s.AcquireWait(ended, leasehold.AcquireRequest{Name: "n", Owner: "o", RequestID: "r", TTL: time.Second}); !errors.Is(err, context.Canceled) {
		t.Fatalf("AcquireWait with an ended ctx: %v, want context.Canceled", err)
	}
	if q := queued(t, s, "n"); len(q) != 1 {
		t.Fatalf("queue after the clean-up: %v, want only the other request's entry", q)
	}

	// A grant handed to o/r is released; one to another request is kept.
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "g", Owner: "o", RequestID: "r", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "o", RequestID: "x", TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"g", "k"} {
		if _, err := s.AcquireWait(ended, leasehold.AcquireRequest{Name: name, Owner: "o", RequestID: "r", TTL: time.Second}); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait(%s) with an ended ctx: %v, want context.Canceled", name, err)
		}
	}
	if r, err := s.cli.Get(ctx, s.leaseKey("g")); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("lease g after the clean-up: %v, %v; want released", r, err)
	}
	if r, err := s.cli.Get(ctx, s.leaseKey("k")); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("lease k after the clean-up: %v, %v; want still held", r, err)
	}
}
