package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

func semReq(owner, requestID string, wait time.Duration) AcquireRequest {
	r := pxReq("", owner, 10*time.Minute)
	r.RequestID = requestID
	r.Wait = wait
	return r
}

// semPoll starts one AcquirePermit of n permits of pool and returns its
// answer's channel.
func semPoll(ctx context.Context, e PermitBackend, n int, req AcquireRequest) chan parkAnswer {
	ch := make(chan parkAnswer, 1)
	go func() {
		rec, err := e.AcquirePermit(ctx, "pool", n, req)
		ch <- parkAnswer{rec, err}
	}()
	return ch
}

func semTake(t *testing.T, e PermitBackend, n int, owner string) leasehold.Record {
	t.Helper()
	rec, err := e.AcquirePermit(context.Background(), "pool", n, semReq(owner, "", 0))
	if err != nil {
		t.Fatalf("AcquirePermit(pool, %d) by %s: %v", n, owner, err)
	}
	return rec
}

func answer(t *testing.T, ch chan parkAnswer, what string) parkAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer in 10 s", what)
	}
	return parkAnswer{}
}

// waitUntil polls cond for up to a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func owners(ws []Waiter) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.Owner)
	}
	return out
}

// TestEnginePermitWaitersCounted is the outside user's scenario (issue 27,
// item 3): 2 of 2 permits held, 2 more acquires waiting. Before, they
// waited in the client (or, over HTTP, in a loop of the handler) and the
// server counted 0 waiters; now they wait in the engine's queue of the
// semaphore: Stats counts 2, and each permit lists both, with their ages.
func TestEnginePermitWaitersCounted(t *testing.T) {
	e, clk := parkEngine(t)
	a := semTake(t, e, 2, "a")
	b := semTake(t, e, 2, "b")
	if a.Name != "pool/permit/0" || b.Name != "pool/permit/1" {
		t.Fatalf("granted %s and %s, want pool/permit/0 and pool/permit/1", a.Name, b.Name)
	}
	w1 := semPoll(context.Background(), e, 2, semReq("w1", "r1", time.Minute))
	clk.WaitForTimers(1)
	clk.Advance(3 * time.Second)
	w2 := semPoll(context.Background(), e, 2, semReq("w2", "r2", time.Minute))
	clk.WaitForTimers(2)
	clk.Advance(2 * time.Second)

	if got := e.Stats().Waiters; got != 2 {
		t.Errorf("Stats().Waiters = %d, want 2", got)
	}
	for _, p := range []string{"pool/permit/0", "pool/permit/1"} {
		ws := e.Waiters(p)
		if got := owners(ws); strings.Join(got, ",") != "w1,w2" {
			t.Fatalf("Waiters(%s) = %v, want [w1 w2]", p, got)
		}
		if ws[0].Waited != 5*time.Second || ws[1].Waited != 2*time.Second {
			t.Errorf("Waiters(%s) waited %v and %v, want 5s and 2s", p, ws[0].Waited, ws[1].Waited)
		}
	}
	if err := e.Release(context.Background(), b.Name, "b", b.Token); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, w1, "w1"); got.err != nil || got.rec.Name != b.Name || got.rec.Owner != "w1" {
		t.Fatalf("w1 got %+v, %v; want %s", got.rec, got.err, b.Name)
	}
	if err := e.Release(context.Background(), a.Name, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, w2, "w2"); got.err != nil || got.rec.Name != a.Name {
		t.Fatalf("w2 got %+v, %v; want %s", got.rec, got.err, a.Name)
	}
	if got := e.Stats().Waiters; got != 0 {
		t.Errorf("Stats().Waiters = %d after both were granted, want 0", got)
	}
}

// TestEnginePermitArrivalOrder: three waiters queued at 0, 1 and 2 s are
// granted in that order as permits free (by release and by expiry).
func TestEnginePermitArrivalOrder(t *testing.T) {
	e, clk := parkEngine(t)
	ctx := context.Background()
	a := semTake(t, e, 2, "a")
	short := semReq("b", "", 0)
	short.TTL = 20 * time.Second
	b, err := e.AcquirePermit(ctx, "pool", 2, short)
	if err != nil {
		t.Fatal(err)
	}
	var chans []chan parkAnswer
	for i, o := range []string{"w0", "w1", "w2"} {
		chans = append(chans, semPoll(ctx, e, 2, semReq(o, o, 10*time.Minute)))
		clk.WaitForTimers(i + 1)
		clk.Advance(time.Second)
	}
	if got := owners(e.Waiters("pool/permit/0")); strings.Join(got, ",") != "w0,w1,w2" {
		t.Fatalf("queue %v, want [w0 w1 w2]", got)
	}
	if err := e.Release(ctx, a.Name, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	g0 := answer(t, chans[0], "w0")
	if g0.err != nil || g0.rec.Name != a.Name {
		t.Fatalf("first release: w0 got %+v, %v", g0.rec, g0.err)
	}
	// b's permit expires (without the expiry loop, the engine applies a
	// due expiry when the name is next touched: b's late renewal).
	clk.Advance(20 * time.Second)
	if err := e.Renew(ctx, b.Name, "b", b.Token, time.Minute); !errors.Is(err, leasehold.ErrNotHeld) {
		t.Fatalf("renewal of the expired permit: %v", err)
	}
	g1 := answer(t, chans[1], "w1")
	if g1.err != nil || g1.rec.Name != b.Name || g1.rec.Owner != "w1" {
		t.Fatalf("expiry: w1 got %+v, %v; want %s", g1.rec, g1.err, b.Name)
	}
	if err := e.Release(ctx, g0.rec.Name, "w0", g0.rec.Token); err != nil {
		t.Fatal(err)
	}
	g2 := answer(t, chans[2], "w2")
	if g2.err != nil || g2.rec.Name != g0.rec.Name {
		t.Fatalf("w2 got %+v, %v", g2.rec, g2.err)
	}
}

// TestEnginePermitSmallerN: a waiter for 1 permit does not take permit 1;
// the permit goes to the next waiter that may take it.
func TestEnginePermitSmallerN(t *testing.T) {
	e, clk := parkEngine(t)
	ctx := context.Background()
	semTake(t, e, 2, "a")
	b := semTake(t, e, 2, "b")
	one := semPoll(ctx, e, 1, semReq("one", "", time.Minute))
	clk.WaitForTimers(1)
	two := semPoll(ctx, e, 2, semReq("two", "", time.Minute))
	clk.WaitForTimers(2)
	if got := owners(e.Waiters("pool/permit/1")); strings.Join(got, ",") != "two" {
		t.Errorf("Waiters(pool/permit/1) = %v, want [two] (one may take permit 0 only)", got)
	}
	if err := e.Release(ctx, b.Name, "b", b.Token); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, two, "two"); got.err != nil || got.rec.Name != b.Name {
		t.Fatalf("two got %+v, %v; want %s", got.rec, got.err, b.Name)
	}
	select {
	case got := <-one:
		t.Fatalf("the waiter for 1 permit was answered %+v, %v", got.rec, got.err)
	default:
	}
	if got := e.Stats().Waiters; got != 1 {
		t.Errorf("Stats().Waiters = %d, want 1", got)
	}
}

// TestEnginePermitWaiterLeaves: a waiter whose context ends, and one whose
// wait runs out without a request id, leave no entry behind: no waiter
// counted or listed, and a permit freed afterwards stays free.
func TestEnginePermitWaiterLeaves(t *testing.T) {
	e, clk := parkEngine(t)
	ctx := context.Background()
	a := semTake(t, e, 1, "a")
	cctx, cancel := context.WithCancel(ctx)
	gone := semPoll(cctx, e, 1, semReq("gone", "g", time.Minute))
	clk.WaitForTimers(1)
	timed := semPoll(ctx, e, 1, semReq("timed", "", 2*time.Second))
	clk.WaitForTimers(2)
	if got := e.Stats().Waiters; got != 2 {
		t.Fatalf("Stats().Waiters = %d, want 2", got)
	}
	cancel()
	if got := answer(t, gone, "cancelled"); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v, %v", got.rec, got.err)
	}
	clk.Advance(2 * time.Second)
	got := answer(t, timed, "timed out")
	var held *leasehold.HeldError
	if !errors.Is(got.err, leasehold.ErrNoPermit) || !errors.As(got.err, &held) || held.Owner != "a" {
		t.Fatalf("timed-out waiter: %v; want ErrNoPermit naming a", got.err)
	}
	if n, ws := e.Stats().Waiters, e.Waiters("pool/permit/0"); n != 0 || len(ws) != 0 {
		t.Fatalf("after both left: Stats().Waiters = %d, Waiters = %v", n, ws)
	}
	if err := e.Release(ctx, a.Name, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	if recs, _ := e.List(ctx, "pool/"); len(recs) != 0 {
		t.Fatalf("permits held after the release: %+v", recs)
	}
	e.lock()
	left := len(e.sems)
	e.unlock()
	if left != 0 {
		t.Errorf("%d semaphore queues left", left)
	}
}

// TestEnginePermitKeepsPlaceAcrossPolls: a semaphore's waiter in long
// polls keeps its place between them, as a lease's does.
func TestEnginePermitKeepsPlaceAcrossPolls(t *testing.T) {
	e, clk := parkEngine(t)
	ctx := context.Background()
	a := semTake(t, e, 1, "a")
	early := semPoll(ctx, e, 1, semReq("early", "e1", 30*time.Second))
	clk.WaitForTimers(1)
	clk.Advance(10 * time.Second)
	late := semPoll(ctx, e, 1, semReq("late", "l1", 30*time.Second))
	clk.WaitForTimers(2)
	clk.Advance(20 * time.Second) // early's poll runs out: its place is kept
	if got := answer(t, early, "early's first poll"); !errors.Is(got.err, leasehold.ErrNoPermit) {
		t.Fatalf("early's first poll: %v", got.err)
	}
	if got := e.Stats().Waiters; got != 2 {
		t.Errorf("Stats().Waiters = %d with early's place kept, want 2", got)
	}
	early = semPoll(ctx, e, 1, semReq("early", "e1", 30*time.Second))
	waitUntil(t, "early's place taken back", func() bool {
		e.lock()
		defer e.unlock()
		return len(e.parked) == 0
	})
	clk.WaitForTimers(2) // early's new poll and late's
	if got := owners(e.Waiters("pool/permit/0")); strings.Join(got, ",") != "early,late" {
		t.Fatalf("queue %v, want [early late]", got)
	}
	if err := e.Release(ctx, a.Name, "a", a.Token); err != nil {
		t.Fatal(err)
	}
	if got := answer(t, early, "early"); got.err != nil || got.rec.Owner != "early" {
		t.Fatalf("early got %+v, %v", got.rec, got.err)
	}
	select {
	case got := <-late:
		t.Fatalf("late answered first: %+v, %v", got.rec, got.err)
	default:
	}
}

// TestEnginePermitBadInput: bad permits or names are an *InvalidError and
// change nothing.
func TestEnginePermitBadInput(t *testing.T) {
	e, _ := parkEngine(t)
	ctx := context.Background()
	long := strings.Repeat("x", leasehold.MaxNameLen-len("/permit/0")+1)
	for _, c := range []struct {
		sem   string
		n     int
		field string
	}{
		{"pool", 0, "permits"},
		{"pool", -1, "permits"},
		{"pool", leasehold.MaxPermits + 1, "permits"},
		{long, 1, "name"},
		{"", 1, "name"},
	} {
		req := semReq("o", "", time.Second)
		_, err := e.AcquirePermit(ctx, c.sem, c.n, req)
		var ie *leasehold.InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("AcquirePermit(%.20q, %d) = %v; want an invalid %s", c.sem, c.n, err, c.field)
		}
	}
	if st := e.Stats(); st.Held != 0 || st.Waiters != 0 {
		t.Fatalf("Stats after bad input: %+v", st)
	}
	if recs, _ := e.List(ctx, ""); len(recs) != 0 {
		t.Fatalf("leases after bad input: %+v", recs)
	}
}
