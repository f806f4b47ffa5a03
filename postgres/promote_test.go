//go:build unix

package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/pgreplica"
)

// lostGrant sets up what an asynchronous promotion loses: a primary and a
// streaming replica (pgreplica); A takes and releases "job" (token 1),
// which the replica replays; the replica is detached (it falls behind, as
// an async replica may); B is granted "job" (token 2) by the primary, an
// acknowledged grant; the primary is killed and the replica promoted.
// It returns the set, a Store on its multi-host URL (which now reaches
// the promoted replica), B's lost grant and when B sent its request.
func lostGrant(t *testing.T, ttl time.Duration, opts ...postgres.Option) (*pgreplica.Set, *postgres.Store, leasehold.Record, time.Time) {
	t.Helper()
	set := pgreplica.Start(t)
	ctx := ctxFor(t, 3*time.Minute)
	u := withParam(withParam(set.URL(), "table", "promote_leases"), "connect_timeout", "5")
	s := open(t, u, opts...)
	t.Cleanup(func() { s.Close() })
	a, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "A", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "job", "A", a.Token); err != nil {
		t.Fatal(err)
	}
	set.CatchUp()
	set.Detach()
	sent := time.Now()
	b, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "B", RequestID: "b1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("B's token %d after A's %d", b.Token, a.Token)
	}
	set.Kill(set.Primary())
	set.Promote()
	return set, s, b, sent
}

// TestAsyncPromotionLosesGrants shows what a promotion of an asynchronous
// replica loses: B's grant, acknowledged by the old primary, is not on the
// promoted replica. Its row still shows A's released grant with A's
// token, so the counter went back below a token already handed out.
func TestAsyncPromotionLosesGrants(t *testing.T) {
	set, s, b, _ := lostGrant(t, time.Minute)
	var token int64
	var held bool
	var owner string
	if err := set.Query(set.Primary(), "SELECT token, held, owner FROM promote_leases WHERE name = 'job'", &token, &held, &owner); err != nil {
		t.Fatal(err)
	}
	if uint64(token) >= b.Token || held || owner != "A" {
		t.Fatalf("promoted replica's row: token %d held %v owner %q; want A's released grant, below B's token %d", token, held, owner, b.Token)
	}
	ctx := ctxFor(t, time.Minute)
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = s.Get(ctx, "job"); errors.Is(err, leasehold.ErrNotFound) {
			return // B, who believes it holds the lease for a minute, is unknown
		}
	}
	t.Fatalf("Get after the promotion: %v, want ErrNotFound", err)
}

// TestPromotionTokensRise: after a promotion that lost B's grant, no one
// is granted "job" before B's lease would have ended, and the grant that
// comes has a token above B's: the store notices the new timeline, holds
// back grants for the hold-back (answering with HoldbackOwner), and raises
// the token floor to the new epoch's. A waiter queued (Client.Acquire,
// through the wait function) on a name the old primary never saw is
// granted after the hold-back too, above the floor.
func TestPromotionTokensRise(t *testing.T) {
	const ttl = 3 * time.Second
	set, s, b, sent := lostGrant(t, ttl, postgres.WithHoldback(ttl))
	ctx := ctxFor(t, time.Minute)
	type got struct {
		rec   leasehold.Record
		after time.Duration
		err   error
	}
	waited := make(chan got, 1)
	go func() {
		c, err := leasehold.New(s, leasehold.WithOwner("W"))
		if err != nil {
			waited <- got{err: err}
			return
		}
		l, err := c.Acquire(ctx, "fresh", leasehold.TTL(time.Minute))
		if err != nil {
			waited <- got{err: err}
			return
		}
		waited <- got{rec: leasehold.Record{Token: l.Token()}, after: time.Since(sent)}
	}()
	held := 0
	for {
		c, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "job", Owner: "C", RequestID: "c1", TTL: time.Minute})
		if err == nil {
			if since := time.Since(sent); since < ttl || c.Token <= b.Token {
				t.Fatalf("C granted token %d %s after B's request (B: token %d, TTL %s): B still believes it holds the lease, or the token went back",
					c.Token, since, b.Token, ttl)
			}
			if c.Token <= 1<<40 || held == 0 {
				t.Fatalf("C granted token %d after %d hold-back answers; want above 2^40 (epoch 2's floor) after at least one", c.Token, held)
			}
			break
		}
		var he *leasehold.HeldError
		switch {
		// Remaining is the hold-back's end less the answering statement's
		// now(), its transaction's start: a statement that began before
		// another session recorded the timeline (and waited on its row)
		// sees a little more than the hold-back (3.002 s seen in CI).
		case errors.As(err, &he) && he.Owner == postgres.HoldbackOwner && he.Token == 0 && he.Remaining > 0 && he.Remaining <= ttl+time.Second:
			held++
		case ctx.Err() != nil:
			t.Fatal(err)
		case errors.As(err, &he):
			t.Fatalf("TryAcquire after the promotion: %+v, want a hold-back", he)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w := <-waited
	if w.err != nil || w.after < ttl || w.rec.Token <= 1<<40 {
		t.Fatalf("waiter: token %d %s after B's request (%v); want after %s, above 2^40", w.rec.Token, w.after, w.err, ttl)
	}
	var epoch int64
	var timeline string
	if err := set.Query(set.Primary(), "SELECT token, request_id FROM promote_leases WHERE name = E'\\x01timeline'", &epoch, &timeline); err != nil {
		t.Fatal(err)
	}
	if epoch != 2 || timeline != "2" {
		t.Fatalf("epoch row: epoch %d, timeline %q; want 2, 2", epoch, timeline)
	}
}
