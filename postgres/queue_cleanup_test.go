package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestQueueEndedCtxCleansUp: AcquireWait called with an ended context
// removes what an earlier call of that owner and request id left (the
// Queuer contract): its entry — so the next release does not hand the
// lease to a caller that has gone, and a waiter behind it is served — and
// a grant handed to that entry since. The leftovers are made as a wait
// that failed on a lost connection leaves them: an entry enqueued by one
// step of the wait function under a waiter id the caller no longer knows.
func TestQueueEndedCtxCleansUp(t *testing.T) {
	base := enginetest.PostgresURL(t)
	u := withParam(base, "table", freshTable(t, base, "lh_test_endedctx_"))
	s, w := open(t, u), open(t, u)
	defer s.Close()
	defer w.Close()
	ctx := ctxFor(t, time.Minute)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	gone := leasehold.AcquireRequest{Name: "e", Owner: "w", RequestID: "rid-lost", TTL: time.Minute}
	holder := func() uint64 { return holdLease(t, ctx, s, "e", "holder", time.Minute).Token }
	leftover := func(waiter string) {
		t.Helper()
		if granted, _, err := postgres.WaitStep(ctx, w, "e", gone.Owner, waiter, gone.RequestID, time.Minute); err != nil || granted {
			t.Fatalf("enqueue: granted=%v, %v", granted, err)
		}
	}
	cleanUp := func() {
		t.Helper()
		if _, err := w.AcquireWait(ended, gone); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait with an ended ctx: %v, want context.Canceled", err)
		}
	}

	// An entry left behind, then the clean-up, then the release: the
	// lease is free (not handed to the caller that has gone).
	tok := holder()
	leftover("lost-1")
	cleanUp()
	if got := queueRows(t, base, s, "e"); got != 0 {
		t.Fatalf("queue rows after the clean-up = %d, want 0", got)
	}
	if err := s.Release(ctx, "e", "holder", tok); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "e"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the release: %+v, %v; want the lease free", got, err)
	}

	// An entry left behind and handed the lease by a release before the
	// clean-up: the clean-up releases that grant.
	tok = holder()
	leftover("lost-2")
	if err := s.Release(ctx, "e", "holder", tok); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "e"); err != nil || got.Owner != gone.Owner {
		t.Fatalf("after the release: %+v, %v; want handed to the leftover entry", got, err)
	}
	cleanUp()
	if got, err := s.Get(ctx, "e"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the clean-up: %+v, %v; want the grant released", got, err)
	}

	// Only that owner and request id's entries go: a live waiter of
	// another request keeps its place and is served.
	tok = holder()
	leftover("lost-3")
	other := make(chan error, 1)
	go func() {
		_, err := w.AcquireWait(ctx, leasehold.AcquireRequest{Name: "e", Owner: "w", RequestID: "rid-live", TTL: time.Minute})
		other <- err
	}()
	for queueRows(t, base, s, "e") < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	cleanUp()
	if got := queueRows(t, base, s, "e"); got != 1 {
		t.Fatalf("queue rows after the clean-up = %d, want the live waiter's 1", got)
	}
	if err := s.Release(ctx, "e", "holder", tok); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the live waiter: %v, want the lease", err)
	}
}
