package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
)

// grantedBy waits for a waiter's result and checks that it is a grant to
// owner; it returns the grant and when it arrived.
func grantedBy(t *testing.T, res <-chan waitResult, owner string, within time.Duration) (leasehold.Record, time.Time) {
	t.Helper()
	select {
	case r := <-res:
		if r.err != nil || r.rec.Owner != owner {
			t.Fatalf("%s: %+v", owner, r)
		}
		return r.rec, time.Now()
	case <-time.After(within):
		t.Fatalf("%s not granted within %s", owner, within)
	}
	panic("unreachable")
}

// releaseLast releases the last grant of name, which s made to owner, and
// checks that its queue left no keys behind.
func (f *queueFixture) releaseLast(ctx context.Context, s *redis.Store, name, owner string, token uint64) {
	f.t.Helper()
	if err := s.Release(ctx, name, owner, token); err != nil {
		f.t.Fatal(err)
	}
	f.noQueueKeys(ctx, name)
}

// TestQueueHandoverWakesNext: when a release hands the lease to the head,
// the waiter behind it learns in the same step that it is the head now,
// and so takes the lease when that grant expires unreleased, not at its
// next refresh (a third of its liveness window: 10s here).
func TestQueueHandoverWakesNext(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "handover-wakes"
	const pTTL = 500 * time.Millisecond
	holder := f.open()
	x := f.hold(ctx, holder, name, "x", time.Minute)
	ps, hs := f.open(redis.WithLiveness(30*time.Second)), f.open(redis.WithLiveness(30*time.Second))
	pRes := acquireWait(ctx, ps, leasehold.AcquireRequest{Name: name, Owner: "p", TTL: pTTL})
	f.waitQueued(ctx, name, 1)
	hRes := acquireWait(ctx, hs, leasehold.AcquireRequest{Name: name, Owner: "h", TTL: time.Minute})
	f.waitQueued(ctx, name, 2)
	released := time.Now()
	if err := holder.Release(ctx, name, "x", x.Token); err != nil {
		t.Fatal(err)
	}
	p, _ := grantedBy(t, pRes, "p", 10*time.Second)
	// p never releases: its grant expires pTTL after it was made, which
	// was after the release.
	h, at := grantedBy(t, hRes, "h", 20*time.Second)
	late := at.Sub(released.Add(pTTL))
	t.Logf("h granted %s after p's grant expired", late)
	if late > 5*time.Second { // was 1.5 s: a round trip after a timer, tight on a loaded machine
		t.Fatalf("h granted %s after p's grant expired, want well below the 10s refresh", late)
	}
	if h.Token <= p.Token || p.Token <= x.Token {
		t.Fatalf("tokens x %d, p %d, h %d: want increasing", x.Token, p.Token, h.Token)
	}
	if runs, msgs := hs.QueueStats(); runs != 2 || msgs != 1 {
		// Its enqueue, the step at p's expiry (which granted it); one
		// message: that it is the head.
		t.Errorf("h: %d wait runs, %d messages; want 2 and 1", runs, msgs)
	}
	f.releaseLast(ctx, hs, name, "h", h.Token)
}

// TestQueueHeadBehindLapsed: a live waiter behind an entry whose waiter
// died counts as the head once that entry's deadline passed, and so times
// its next step by the holder's expiry rather than its refresh.
func TestQueueHeadBehindLapsed(t *testing.T) {
	f := newQueueFixture(t)
	ctx := ctxT(t, time.Minute)
	const name = "behind-lapsed"
	const holderTTL = 7 * time.Second
	holder := f.open()
	start := time.Now()
	f.hold(ctx, holder, name, "holder", holderTTL)
	dead := f.open(redis.WithLiveness(time.Second))
	deadRes := acquireWait(ctx, dead, leasehold.AcquireRequest{Name: name, Owner: "dead", TTL: time.Minute})
	f.waitQueued(ctx, name, 1)
	dead.Close() // a crash: its entry stays until its deadline passes
	if r := <-deadRes; !errors.Is(r.err, leasehold.ErrClosed) {
		t.Fatalf("AcquireWait of a closed store = %+v", r)
	}
	// Steps at 0 and at 5s (its refresh), when the dead entry has lapsed.
	live := f.open(redis.WithLiveness(15 * time.Second))
	liveRes := acquireWait(ctx, live, leasehold.AcquireRequest{Name: name, Owner: "live", TTL: time.Minute})
	f.waitQueued(ctx, name, 2)
	rec, at := grantedBy(t, liveRes, "live", 30*time.Second)
	late := at.Sub(start.Add(holderTTL))
	t.Logf("live granted %s after the holder's grant expired", late)
	if late > 3500*time.Millisecond { // was 1.5 s: a round trip after a timer, tight on a loaded machine
		t.Fatalf("live granted %s after the holder's grant expired, want well below its 5s refresh", late)
	}
	f.releaseLast(ctx, live, name, "live", rec.Token)
}
