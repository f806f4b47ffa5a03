package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/postgres"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestEpochGate drives the epoch row by hand on a server that was never
// promoted (timeline 1), as a promotion would leave it:
//
//   - a row recording another timeline (a change not yet noticed): the
//     next TryAcquire records timeline 1 with a new epoch (one more than
//     the row's) and answers with a hold-back of the Store's length;
//   - while the hold-back lasts, TryAcquire of any name is refused with
//     HoldbackOwner, a release does not hand the lease to the queued
//     waiter, and the waiter is granted once the hold-back is over, with a
//     token above the new epoch's floor, as is the next TryAcquire.
func TestEpochGate(t *testing.T) {
	base := enginetest.PostgresURL(t)
	table := freshTable(t, base, "lh_test_epoch_")
	const holdback = 1500 * time.Millisecond
	s := open(t, withParam(withParam(base, "table", table), "holdback", holdback.String()))
	defer s.Close()
	if s.Holdback() != holdback {
		t.Fatalf("Holdback() = %s, want %s", s.Holdback(), holdback)
	}
	ctx := ctxFor(t, time.Minute)
	a, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "g", Owner: "A", TTL: time.Minute})
	if err != nil || a.Token != 1 {
		t.Fatalf("first grant: %+v, %v; want token 1 (no epoch row on timeline 1: no floor)", a, err)
	}
	// W queues behind A.
	c, err := leasehold.New(s, leasehold.WithOwner("W"))
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan struct{}, 1)
	type got struct {
		token uint64
		at    time.Time
		err   error
	}
	waited := make(chan got, 1)
	go func() {
		l, err := c.Acquire(ctx, "g", leasehold.TTL(time.Minute),
			leasehold.OnWait(func(*leasehold.HeldError) { queued <- struct{}{} }))
		if err != nil {
			waited <- got{err: err}
			return
		}
		waited <- got{token: l.Token(), at: time.Now()}
	}()
	select {
	case <-queued:
	case w := <-waited:
		t.Fatalf("W's Acquire ended (%+v) before it waited", w)
	case <-ctx.Done():
		t.Fatal("W's Acquire did not wait within a minute")
	}
	waitFor(t, 10*time.Second, func() bool { q, _ := postgres.Queued(ctx, s, "g", "W"); return q })

	// The row of an epoch 7 on a timeline this server is not on.
	exec(t, base, `INSERT INTO `+table+` (name, owner, request_id, token, data, ttl_us, expires_at, held, acquired_at)
		VALUES (E'\x01timeline', '', '99', 7, '', 1, now(), false, now())`)
	noticed := time.Now()
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "other", Owner: "B", TTL: time.Minute})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != postgres.HoldbackOwner || he.Token != 0 || he.Remaining <= 0 || he.Remaining > holdback {
		t.Fatalf("TryAcquire after a timeline change: %v, want a hold-back from %q of at most %s", err, postgres.HoldbackOwner, holdback)
	}
	if err := s.Release(ctx, "g", "A", a.Token); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "g", Owner: "B", TTL: time.Minute})
	if !errors.As(err, &he) || he.Owner != postgres.HoldbackOwner {
		t.Fatalf("TryAcquire of the released name in the hold-back: %v, want a hold-back", err)
	}
	const floor = uint64(8-1) << 40 // epoch 8: one more than the row's
	var w got
	select {
	case w = <-waited:
	case <-time.After(2 * time.Minute):
		t.Fatal("W's Acquire (context of a minute) did not return within 2 minutes")
	}
	if w.err != nil || w.at.Sub(noticed) < holdback || w.token <= floor {
		t.Fatalf("waiter: token %d %s after the change (%v); want above %d, after the %s hold-back", w.token, w.at.Sub(noticed), w.err, floor, holdback)
	}
	b, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "other", Owner: "B", TTL: time.Minute})
	if err != nil || b.Token != floor+1 {
		t.Fatalf("TryAcquire of a new name after the hold-back: %+v, %v; want token %d", b, err, floor+1)
	}
	if _, err := s.Get(ctx, "\x01timeline"); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("Get of the epoch row's name: %v, want an invalid name", err)
	}
	if l, err := s.List(ctx, ""); err != nil || len(l) != 2 {
		t.Fatalf("List: %v, %v; want the two leases, not the epoch row", l, err)
	}
}
