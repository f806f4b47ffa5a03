package etcd_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

type acquired struct {
	l   *leasehold.Lease
	err error
	at  time.Time
}

func acquireAsync(ctx context.Context, c *leasehold.Client, name string, errs *atomic.Int32) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, name, leasehold.TTL(6*time.Second), leasehold.OnError(func(error) { errs.Add(1) }))
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

// awaitAcquired returns the lease acquireAsync delivers on ch, failing
// the test with fail if none comes within d, or if Acquire failed.
func awaitAcquired(t *testing.T, ch <-chan acquired, d time.Duration, fail string) acquired {
	t.Helper()
	var a acquired
	select {
	case a = <-ch:
	case <-time.After(d):
		t.Fatal(fail)
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	return a
}

// TestRestart kills etcd (SIGKILL), leaves it down for 2 s and starts it
// again on the same data, while a holder keeps a lease alive (its renewals
// fail meanwhile and succeed again after), another holder has stopped renewing
// (as a crashed one would), and a waiter queues behind each. etcd keeps
// leases and revisions across the restart (and gives every lease a full TTL
// again when it becomes leader), so: the live holder keeps its lease, the
// crashed holder's lease still expires, the waiters get the leases without
// ever overlapping a holder, and no token goes back.
func TestRestart(t *testing.T) {
	srv := enginetest.StartEtcd(t)
	u := srv.EtcdURL() + "/?dial_timeout=10s"
	hs, ws := open(t, u), open(t, u) // the holders' and the waiters' stores
	defer hs.Close()
	defer ws.Close()
	ctx := ctxFor(t, 3*time.Minute)

	var before uint64
	for i := 0; i < 3; i++ {
		rec, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "tokens", Owner: "t", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := hs.Release(ctx, "tokens", "t", rec.Token); err != nil {
			t.Fatal(err)
		}
		before = rec.Token
	}
	holder, _ := leasehold.New(hs, leasehold.WithOwner("holder"))
	live, err := holder.Acquire(ctx, "live", leasehold.TTL(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := holder.Acquire(ctx, "crashed", leasehold.TTL(3*time.Second), leasehold.NoKeepalive())
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := leasehold.New(ws, leasehold.WithOwner("waiter"))
	var errs atomic.Int32
	gotLive, gotCrashed := acquireAsync(ctx, waiter, "live", &errs), acquireAsync(ctx, waiter, "crashed", &errs)
	time.Sleep(300 * time.Millisecond)

	t0 := time.Now()
	srv.Kill()
	time.Sleep(2 * time.Second)
	srv.Start()
	for {
		gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := hs.Get(gctx, "tokens")
		cancel()
		if err == nil || errors.Is(err, leasehold.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd did not come back: %v", err)
		}
	}
	down := time.Since(t0)

	// The crashed holder's lease expires after the restart; the waiter
	// takes it, not before the holder's local deadline.
	c := awaitAcquired(t, gotCrashed, 60*time.Second, "the waiter never got the crashed holder's lease")
	if c.at.Before(crashed.Deadline()) {
		t.Errorf("waiter got the crashed holder's lease at %s, before its deadline %s", c.at, crashed.Deadline())
	}
	if c.l.Token() <= crashed.Token() || crashed.Token() <= before {
		t.Errorf("tokens went back: %d before the restart, %d crashed, %d after", before, crashed.Token(), c.l.Token())
	}
	t.Logf("etcd answered again %s after the kill; the crashed holder's 3s lease was taken over %s after the kill",
		down.Round(time.Millisecond), c.at.Sub(t0).Round(time.Millisecond))

	// The live holder kept its lease through the restart.
	if err := live.Err(); err != nil {
		t.Fatalf("the live holder lost its lease over the restart: %v", err)
	}
	select {
	case r := <-gotLive:
		t.Fatalf("the waiter got a lease that is held: %+v", r)
	default:
	}
	releasedAt := time.Now()
	if err := live.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := awaitAcquired(t, gotLive, 30*time.Second, "the waiter did not get the lease after its release")
	if r.at.Before(releasedAt) {
		t.Errorf("overlap: the waiter got the lease at %s, before the holder released it at %s", r.at, releasedAt)
	}
	if r.l.Token() <= live.Token() {
		t.Errorf("token after the restart %d <= %d", r.l.Token(), live.Token())
	}
	after, err := hs.TryAcquire(ctx, leasehold.AcquireRequest{Name: "tokens", Owner: "t", TTL: time.Minute})
	if err != nil || after.Token <= max(r.l.Token(), c.l.Token()) {
		t.Errorf("a new grant after the restart: %+v, %v", after, err)
	}
	t.Logf("live holder kept its lease; waiter got it %s after the release; %d transient errors seen by the waiters",
		r.at.Sub(releasedAt).Round(time.Microsecond), errs.Load())
	r.l.Release(ctx)
	c.l.Release(ctx)
}
