package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/brokenstore"
)

// A queued wait whose store wait failed (a lost connection) and whose Wait
// then ran out asks the store to remove what that wait may have left in
// its queue, with the same request: no later release hands the lease to a
// caller that has gone.
func TestProxyQueuedWaitCleansUpAfterFailure(t *testing.T) {
	q := &brokenstore.Lossy{Store: memory.New()}
	p := pxNew(t, q, ProxyConfig{BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	ctx := context.Background()
	if _, err := q.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, err := p.Acquire(ctx, AcquireRequest{
		AcquireRequest: leasehold.AcquireRequest{Name: "job", Owner: "b", RequestID: "r-1", TTL: time.Minute},
		Wait:           150 * time.Millisecond,
	})
	var held *leasehold.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("Acquire: %v, want a HeldError once the Wait ran out", err)
	}
	reqs, ended := q.Calls()
	n := len(ended)
	if n < 2 || ended[0] || !ended[n-1] {
		t.Fatalf("store waits (ctx ended?): %v, want live waits then one clean-up call with the ended context", ended)
	}
	if last := reqs[n-1]; last.RequestID != "r-1" || last.Owner != "b" {
		t.Fatalf("the clean-up call's request %+v is not the failed wait's", last)
	}
}
