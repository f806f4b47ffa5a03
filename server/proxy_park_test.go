package server

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// proxyPolling waits (in real time, briefly) until every park of p has a
// poll waiting on it and n fake timers run: each poll that ran out has been
// followed by the next.
func proxyPolling(t *testing.T, p *Proxy, fc *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		waiting := true
		for _, pk := range p.parks {
			if pk.polls == 0 {
				waiting = false
			}
		}
		p.mu.Unlock()
		if waiting && fc.Timers() == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("parks without a poll, or %d timers (want %d), after 10 s", fc.Timers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func proxyParkReq(owner, requestID string, wait time.Duration) AcquireRequest {
	r := pxReq("job", owner, 10*time.Minute)
	r.RequestID, r.Wait = requestID, wait
	return r
}

// proxyPollRunsOut makes a 2-second poll by owner with request id rid on
// "job" (held by another) and runs it out on fc: it answers held, and its
// place is kept.
func proxyPollRunsOut(t *testing.T, p *Proxy, fc *clock.Fake, owner, rid string) {
	t.Helper()
	ch := poll(p, proxyParkReq(owner, rid, 2*time.Second))
	servertest.WaitFor(t, owner+" queued", func() bool { return len(p.Waiters("job")) == 1 })
	proxyPolling(t, p, fc, 3)
	fc.Advance(2 * time.Second)
	if a := <-ch; !errors.Is(a.err, leasehold.ErrHeld) {
		t.Fatalf("%s's poll that ran out: %+v, %v; want held", owner, a.rec, a.err)
	}
}

// TestProxyWaiterKeepsPlaceAcrossPolls: in front of a store that does not
// queue (the proxy's own queue), waiters in 30-second polls keep their
// arrival order and their ages over three minutes.
func TestProxyWaiterKeepsPlaceAcrossPolls(t *testing.T) {
	fc, p := pxFake(t, nil)
	holder := pxAcquire(t, p, proxyParkReq("holder", "h", 0))
	answers := make(chan parkAnswer, 2)
	var earlyPolls, latePolls atomic.Int32
	go pollUntilGranted(p, proxyParkReq("early", "early-1", 30*time.Second), &earlyPolls, answers)
	servertest.WaitFor(t, "early queued", func() bool { return len(p.Waiters("job")) == 1 })
	proxyPolling(t, p, fc, 3) // early's poll, its park's wait, and that wait's retry timer
	fc.Advance(10 * time.Second)
	go pollUntilGranted(p, proxyParkReq("late", "late-1", 30*time.Second), &latePolls, answers)
	servertest.WaitFor(t, "late queued", func() bool { return len(p.Waiters("job")) == 2 })
	proxyPolling(t, p, fc, 5)
	for range 180 {
		fc.Advance(time.Second)
		proxyPolling(t, p, fc, 5)
	}
	earlyThenLate(t, p, holder.Token, answers)
	if earlyPolls.Load() < 6 || latePolls.Load() < 6 {
		t.Fatalf("polls: early %d, late %d; the test meant to cross several polls' ends", earlyPolls.Load(), latePolls.Load())
	}
}

// TestProxyFIFOAcrossPolls: two proxies in front of one queuing store (an
// engine): a waiter whose 1-second polls run out keeps its place in the
// store's queue ahead of one that came later through the other proxy.
func TestProxyFIFOAcrossPolls(t *testing.T) {
	_, ps := pxShared(t, 2)
	holder := pxAcquire(t, ps[0], proxyParkReq("holder", "h", 0))
	answers := make(chan parkAnswer, 2)
	var earlyPolls, latePolls atomic.Int32
	go pollUntilGranted(ps[0], proxyParkReq("early", "early-1", time.Second), &earlyPolls, answers)
	servertest.WaitFor(t, "early queued", func() bool { return pxWaiting(ps, "job") == 1 })
	go pollUntilGranted(ps[1], proxyParkReq("late", "late-1", time.Second), &latePolls, answers)
	servertest.WaitFor(t, "late queued", func() bool { return pxWaiting(ps, "job") == 2 })
	// Several of both polls run out (real time: 1-second polls).
	servertest.WaitFor(t, "three polls each", func() bool { return earlyPolls.Load() >= 3 && latePolls.Load() >= 3 })
	if err := ps[0].Release(context.Background(), "job", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	first := <-answers
	if first.err != nil || first.rec.Owner != "early" {
		t.Fatalf("first grant: %+v, %v; want early (queued first, through the other proxy)", first.rec, first.err)
	}
	if err := ps[0].Release(context.Background(), "job", "early", first.rec.Token); err != nil {
		t.Fatal(err)
	}
	if second := <-answers; second.err != nil || second.rec.Owner != "late" {
		t.Fatalf("second grant: %+v, %v; want late", second.rec, second.err)
	}
}

// TestProxyParkEnds: a park nobody polls again ends after ParkGrace and a
// grant it got is released (the next waiter gets the lease); a try with
// its request id gives it up; a poll whose caller went away leaves at once.
func TestProxyParkEnds(t *testing.T) {
	fc, p := pxFake(t, nil)
	holder := pxAcquire(t, p, proxyParkReq("holder", "h", 0))
	proxyPollRunsOut(t, p, fc, "gone", "gone-1")
	if ws := p.Waiters("job"); len(ws) != 1 || ws[0].Owner != "gone" {
		t.Fatalf("after the poll ran out: %+v; want gone's place kept", ws)
	}
	if err := p.Release(context.Background(), "job", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	servertest.WaitFor(t, "gone granted while parked", func() bool {
		rec, err := p.Get(context.Background(), "job")
		return err == nil && rec.Owner == "gone"
	})
	next := poll(p, proxyParkReq("next", "next-1", time.Hour))
	servertest.WaitFor(t, "next queued", func() bool { return len(p.Waiters("job")) == 1 })
	fc.Advance(ParkGrace)
	servertest.WaitFor(t, "gone's grant released", func() bool {
		rec, err := p.Get(context.Background(), "job")
		return err != nil || rec.Owner != "gone"
	})
	proxyPolling(t, p, fc, 0)
	for a := (parkAnswer{}); a.rec.Owner == ""; {
		select {
		case a = <-next:
			if a.err != nil || a.rec.Owner != "next" {
				t.Fatalf("next: %+v, %v; want the lease", a.rec, a.err)
			}
		case <-time.After(20 * time.Millisecond):
			fc.Advance(10 * time.Millisecond) // the proxy's head retries on its backoff
		}
	}

	// A try with a parked request id gives the place up.
	proxyPollRunsOut(t, p, fc, "w", "w-1")
	if _, err := p.Acquire(context.Background(), proxyParkReq("w", "w-1", 0)); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("try with the parked request id: %v; want held", err)
	}
	if n := len(p.Waiters("job")); n != 0 {
		t.Fatalf("%d waiters after the try; want 0", n)
	}

	// A caller that goes away leaves at once.
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, proxyParkReq("c", "c-1", time.Minute))
		left <- err
	}()
	servertest.WaitFor(t, "c queued", func() bool { return len(p.Waiters("job")) == 1 })
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled poll: %v", err)
	}
	servertest.WaitFor(t, "c gone from the queue", func() bool { return len(p.Waiters("job")) == 0 })
	p.mu.Lock()
	n := len(p.parks)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d parks left", n)
	}
}

// TestProxyGiveUpEndsPendingPoll (red team of issue 27, #5): a try with
// the request id of a poll that is still pending (the client gave up
// while its poll waited on a pipelined RESP connection) gives the place
// up, and that poll answers "held" instead of waiting anew: it waited
// anew before, and a release meanwhile granted the lease to a caller that
// had gone ("run -w 2" through RESP to a Redis proxy, 2 runs of 5).
func TestProxyGiveUpEndsPendingPoll(t *testing.T) {
	fc, p := pxFake(t, nil)
	holder := pxAcquire(t, p, proxyParkReq("holder", "h", 0))
	pending := poll(p, proxyParkReq("w", "w-1", time.Minute))
	servertest.WaitFor(t, "w queued", func() bool { return len(p.Waiters("job")) == 1 })
	proxyPolling(t, p, fc, 3)
	if _, err := p.Acquire(context.Background(), proxyParkReq("w", "w-1", 0)); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("the give-up (a try with the pending poll's request id): %v; want held", err)
	}
	if err := p.Release(context.Background(), "job", "holder", holder.Token); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-pending:
		if !errors.Is(a.err, leasehold.ErrHeld) {
			t.Fatalf("the pending poll after the give-up: %+v, %v; want held, not a grant", a.rec, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pending poll still waits 10 s after its request id gave the place up")
	}
	if rec, err := p.Get(context.Background(), "job"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("after the holder's release: %+v, %v; want the lease free", rec, err)
	}
	if n := len(p.Waiters("job")); n != 0 {
		t.Fatalf("%d waiters left; want 0", n)
	}
}

// TestProxyShortPollWaitsOnPark (red team of issue 27, #5): the last poll
// of a wait about to end asks for the time left (down to 1 ms), below the
// wait a park needs; with its request id's place kept, it waits on that
// place instead of queueing a second waiter beside it (in a Redis proxy, a
// second entry with the same request id, after which the give-up left
// one behind and a release granted the gone waiter).
func TestProxyShortPollWaitsOnPark(t *testing.T) {
	fc, p := pxFake(t, nil)
	pxAcquire(t, p, proxyParkReq("holder", "h", 0))
	proxyPollRunsOut(t, p, fc, "w", "w-1")
	short := poll(p, proxyParkReq("w", "w-1", 5*time.Millisecond))
	proxyPolling(t, p, fc, 3) // the park's wait and retry timer, and the short poll's
	if ws := p.Waiters("job"); len(ws) != 1 {
		t.Fatalf("waiters during the short poll: %+v; want w's one kept place", ws)
	}
	fc.Advance(5 * time.Millisecond)
	if a := <-short; !errors.Is(a.err, leasehold.ErrHeld) {
		t.Fatalf("the short poll: %+v, %v; want held", a.rec, a.err)
	}
	if _, err := p.Acquire(context.Background(), proxyParkReq("w", "w-1", 0)); !errors.Is(err, leasehold.ErrHeld) {
		t.Fatalf("the give-up: %v; want held", err)
	}
	if ws := p.Waiters("job"); len(ws) != 0 {
		t.Fatalf("waiters after the give-up: %+v; want none", ws)
	}
}
