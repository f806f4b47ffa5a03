package workflow

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// waitTurns waits until n of this process's transitions of id wait for
// their turn.
func waitTurns(t *testing.T, w *Workflows, id string, n int) {
	t.Helper()
	waitHot(t, w, id, n, "never %d waiting for their turn", func(h *hotInstance) int { return len(h.turns.waiting) })
}

// waitHot waits, polling 10000 times a millisecond apart at most, until
// count(h) (called under h.mu) of id's hot instance h is at least n;
// past that it fails with the message fail (a format of n).
func waitHot(t *testing.T, w *Workflows, id string, n int, fail string, count func(h *hotInstance) int) {
	t.Helper()
	h := w.acquireHot(id)
	defer w.releaseHot(h)
	for range 10000 {
		h.mu.Lock()
		l := count(h)
		h.mu.Unlock()
		if l >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf(fail, n)
}

func newCounting(t *testing.T, cfg Config, n int) *Workflows {
	t.Helper()
	tr := map[string][]string{}
	for i := range n {
		tr[strconv.Itoa(i)] = []string{strconv.Itoa(i + 1)}
	}
	w, err := New(Definition{Name: "turns", Initial: "0", Transitions: tr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestOptimisticTakesTurns: the Optimistic callers of one instance in one
// process write one at a time, in arrival order: while one is in its
// transaction, the others wait (none enters a transaction of its own to
// conflict), and one that arrived asking for the next transition gets it
// applied instead of being refused because the instance had not got there
// yet.
func TestOptimisticTakesTurns(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore()
	w := newCounting(t, Config{Records: g, Strategy: Optimistic}, 10)
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	a := transitionAsync(ctx, w, "0", "1", "ua", "a")
	<-g.entered // a is in its transaction
	b := transitionAsync(ctx, w, "0", "1", "ub", "b")
	waitTurns(t, w, "i", 1)
	c := transitionAsync(ctx, w, "1", "2", "uc", "c")
	waitTurns(t, w, "i", 2)
	select {
	case <-g.entered:
		t.Fatal("a second transaction started while a was in its own")
	case <-time.After(50 * time.Millisecond):
	}
	close(g.permit)
	ra, rb, rc := <-a, <-b, <-c
	if ra.err != nil || ra.r.Outcome != Applied || ra.r.Version != 1 {
		t.Fatalf("a: %+v", ra)
	}
	if rb.err != nil || rb.r.Outcome != AlreadyDone || rb.r.Entry.RequestID != "a" {
		t.Fatalf("b: %+v", rb)
	}
	if rc.err != nil || rc.r.Outcome != Applied || rc.r.Version != 2 {
		t.Fatalf("c: %+v", rc)
	}
	if n := g.txns.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2 (a's and c's; b is refused from a read)", n)
	}
}

// holdTurn takes a turn of instance i on w (h is i's hot instance) for
// request req; the caller ends it with done.
func holdTurn(t *testing.T, ctx context.Context, w *Workflows, h *hotInstance, req string) *turn {
	t.Helper()
	tr, err := w.takeTurn(ctx, h, &command{id: "i", requestID: req})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// movedOnWhileWaiting creates instance i on w; b arrives asking 0 → 1
// and waits for its turn behind x (a turn held for request x), and other
// (another process) moves i from 0 to 1 meanwhile, as request o. It
// returns i's hot instance (released when the test ends), x (ending it
// lets b on, to be told) and b's result.
func movedOnWhileWaiting(t *testing.T, ctx context.Context, w, other *Workflows) (h *hotInstance, x *turn, b chan res) {
	t.Helper()
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	h = w.acquireHot("i")
	t.Cleanup(func() { w.releaseHot(h) })
	x = holdTurn(t, ctx, w, h, "x")
	b = transitionAsync(ctx, w, "0", "1", "ub", "b")
	waitTurns(t, w, "i", 1)
	if _, err := other.Transition(ctx, "i", "0", "1", "uo", "o"); err != nil {
		t.Fatal(err)
	}
	return h, x, b
}

// bAsksAgainAfterD: with a turn held (for request y), d arrives asking
// 1 → 2, then b asks 1 → 2 again with its request id; the turn ends. It
// returns b's and d's results.
func bAsksAgainAfterD(t *testing.T, ctx context.Context, w *Workflows, h *hotInstance) (b, d chan res) {
	t.Helper()
	y := holdTurn(t, ctx, w, h, "y")
	d = transitionAsync(ctx, w, "1", "2", "ud", "d")
	waitTurns(t, w, "i", 1)
	b = transitionAsync(ctx, w, "1", "2", "ub", "b")
	waitTurns(t, w, "i", 2)
	y.done(true)
	return b, d
}

// TestTurnKeepsPlace: a caller told that the instance moved on who asks
// again with the same request id keeps the place where it first arrived:
// it goes before a caller that arrived after it, even one now waiting
// longer than its new call.
func TestTurnKeepsPlace(t *testing.T) {
	for _, s := range []Strategy{Optimistic, Lease} {
		t.Run(string(s), func(t *testing.T) {
			ctx := context.Background()
			m := memory.New()
			w := newCounting(t, Config{Records: m, Leases: m, Strategy: s}, 10)
			other := newCounting(t, Config{Records: m, Leases: m, Strategy: Optimistic}, 10) // another process
			// b arrives first, asking 0 → 1, and waits behind x; another
			// process moves the instance meanwhile: b is told.
			h, x, b1 := movedOnWhileWaiting(t, ctx, w, other)
			x.done(true)
			if r := <-b1; r.err != nil || r.r.Outcome != AlreadyDone || r.r.Entry.RequestID != "o" {
				t.Fatalf("b, first call: %+v", r)
			}
			// d arrives, then b asks again from 1: b goes first.
			b2, d := bAsksAgainAfterD(t, ctx, w, h)
			rb, rd := <-b2, <-d
			if rb.err != nil || rb.r.Outcome != Applied || rb.r.Version != 2 {
				t.Fatalf("b, asking again: %+v", rb)
			}
			if rd.err != nil || rd.r.Outcome != AlreadyDone || rd.r.Entry.RequestID != "b" {
				t.Fatalf("d: %+v", rd)
			}
			h.mu.Lock()
			left := len(h.turns.arrived)
			h.mu.Unlock()
			if left != 1 { // d, told already-done, may ask again
				t.Fatalf("%d places remembered, want 1 (d's)", left)
			}
		})
	}
}

// TestTurnKeepsPlaceAfterLongWait: a caller that waited for its turn
// longer than Window, and was then told the instance moved on, still keeps
// its place when it asks again at once (places not asked for within a
// Window are forgotten, but the clock starts when the caller is answered).
func TestTurnKeepsPlaceAfterLongWait(t *testing.T) {
	ctx := context.Background()
	m := memory.New()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := newCounting(t, Config{Records: m, Strategy: Optimistic, Window: time.Second, Clock: fake}, 10)
	other := newCounting(t, Config{Records: m, Strategy: Optimistic}, 10)
	h, x, b1 := movedOnWhileWaiting(t, ctx, w, other)
	fake.Advance(5 * time.Second) // b has waited 5 Windows
	x.done(true)
	if r := <-b1; r.err != nil || r.r.Outcome != AlreadyDone {
		t.Fatalf("b, first call: %+v", r)
	}
	// Taking y's turn forgets the places not asked for within a Window.
	b2, d := bAsksAgainAfterD(t, ctx, w, h)
	if rb := <-b2; rb.err != nil || rb.r.Outcome != Applied {
		t.Fatalf("b, asking again: %+v", rb)
	}
	if rd := <-d; rd.err != nil || rd.r.Outcome != AlreadyDone || rd.r.Entry.RequestID != "b" {
		t.Fatalf("d: %+v", rd)
	}
	// A place not asked for within a Window is forgotten.
	fake.Advance(2 * time.Second)
	holdTurn(t, ctx, w, h, "z").done(true)
	h.mu.Lock()
	left := len(h.turns.arrived)
	h.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d places remembered, want 0 (d's was not asked for within a Window)", left)
	}
}

// TestOptimisticTurnBounded: a caller waits for its turn at most LockWait
// and is then refused with an error matching leasehold.ErrLockTimeout,
// having changed nothing.
func TestOptimisticTurnBounded(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore()
	w := newCounting(t, Config{Records: g, Strategy: Optimistic, LockWait: 100 * time.Millisecond}, 10)
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	a := transitionAsync(ctx, w, "0", "1", "ua", "a")
	<-g.entered
	b := transitionAsync(ctx, w, "0", "1", "ub", "b")
	var rb res
	select {
	case rb = <-b:
	case <-time.After(10 * time.Second):
		close(g.permit)
		t.Fatal("b still waiting after 10s")
	}
	close(g.permit)
	if !errors.Is(rb.err, leasehold.ErrLockTimeout) {
		t.Fatalf("b: %+v", rb)
	}
	if ra := <-a; ra.err != nil || ra.r.Outcome != Applied {
		t.Fatalf("a: %+v", ra)
	}
	if n := g.txns.Load(); n != 1 {
		t.Fatalf("%d transactions, want 1", n)
	}
	if _, err := w.Lookup(ctx, "i", "b"); !errors.Is(err, ErrNoRequest) {
		t.Fatalf("b's request: %v", err)
	}
}

// TestTurnsManyCallers: 50 callers of one instance, each advancing it
// n → n+1 until its own transition applies, every strategy: each request
// applies exactly once, and no place is left remembered afterwards.
func TestTurnsManyCallers(t *testing.T) {
	for _, s := range []Strategy{Optimistic, Pessimistic, Lease} {
		t.Run(string(s), func(t *testing.T) {
			ctx := context.Background()
			m := memory.New()
			const callers = 50
			w := newCounting(t, Config{Records: m, Leases: m, Strategy: s, LockWait: time.Minute}, callers)
			if _, err := w.Create(ctx, "i"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for i := range callers {
				wg.Go(func() {
					req := "r" + strconv.Itoa(i)
					n := 0
					for {
						r, err := w.Apply(ctx, Request{Instance: "i", From: strconv.Itoa(n), To: strconv.Itoa(n + 1), Actor: "u", RequestID: req})
						if err != nil {
							errs <- err
							return
						}
						if r.Outcome == Applied {
							return
						}
						n, _ = strconv.Atoi(r.State)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			in, err := w.Get(ctx, "i")
			if err != nil {
				t.Fatal(err)
			}
			hist, err := w.History(ctx, "i")
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, e := range hist {
				if seen[e.RequestID] {
					t.Fatalf("%s applied twice", e.RequestID)
				}
				seen[e.RequestID] = true
			}
			if in.Version != callers || len(hist) != callers {
				t.Fatalf("version %d, %d entries, want %d", in.Version, len(hist), callers)
			}
			h := w.acquireHot("i")
			defer w.releaseHot(h)
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.turns.held || len(h.turns.waiting) > 0 || len(h.turns.arrived) > 0 {
				t.Fatalf("turns left: held %v, %d waiting, %d places", h.turns.held, len(h.turns.waiting), len(h.turns.arrived))
			}
		})
	}
}

// TestQueueKeepsPlaceAfterLongWait: in Adaptive's queue too, a caller that
// waited longer than Window and was then told the instance moved on keeps
// its place when it asks again: it goes before a caller that arrived after
// it.
func TestQueueKeepsPlaceAfterLongWait(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore()
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w, err := New(chain("q"), Config{Records: g, LocalQueue: true, Strategy: Adaptive, Window: time.Second, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	queued(t, w, "i")
	r0 := transitionAsync(ctx, w, "A", "B", "u0", "r0")
	<-g.entered                                        // the head is in r0's transaction
	b1 := transitionAsync(ctx, w, "A", "B", "ub", "b") // will be told r0 did it
	waitQueue(t, w, "i", 1)
	c := transitionAsync(ctx, w, "B", "C", "uc", "c")
	waitQueue(t, w, "i", 2)
	fake.Advance(5 * time.Second) // b waits 5 Windows
	g.permit <- struct{}{}        // r0
	<-g.entered                   // b and c's batch
	d := transitionAsync(ctx, w, "C", "D", "ud", "d")
	waitQueue(t, w, "i", 1)
	g.permit <- struct{}{} // c applied, b told
	if r := <-b1; r.err != nil || r.r.Outcome != AlreadyDone || r.r.Entry.RequestID != "r0" {
		t.Fatalf("b, first call: %+v", r)
	}
	<-g.entered // d's batch
	e := transitionAsync(ctx, w, "D", "A", "ue", "e")
	waitQueue(t, w, "i", 1)
	b2 := transitionAsync(ctx, w, "D", "A", "ub", "b") // b asks again, after e
	waitQueue(t, w, "i", 2)
	close(g.permit)
	for name, ch := range map[string]chan res{"r0": r0, "c": c, "d": d} {
		if r := <-ch; r.err != nil || r.r.Outcome != Applied {
			t.Fatalf("%s: %+v", name, r)
		}
	}
	if r := <-b2; r.err != nil || r.r.Outcome != Applied {
		t.Fatalf("b, asking again: %+v", r)
	}
	if r := <-e; r.err != nil || r.r.Outcome != AlreadyDone || r.r.Entry.RequestID != "b" {
		t.Fatalf("e: %+v", r)
	}
}

// blockedRequests blocks reads of one request record until unblock is
// closed, saying on blocked when one starts.
type blockedRequests struct {
	*memory.Store
	key     string
	blocked chan struct{}
	unblock chan struct{}
}

func (s *blockedRequests) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if key == s.key {
		s.blocked <- struct{}{}
		<-s.unblock
	}
	return s.Store.GetRecord(ctx, key)
}

// TestRefusalPassesTurn: a caller that finds, on its turn, that the
// instance moved on passes the turn on before it checks its request id
// (which needs no turn): the next caller applies meanwhile.
func TestRefusalPassesTurn(t *testing.T) {
	for _, s := range []Strategy{Optimistic, Lease} {
		t.Run(string(s), func(t *testing.T) {
			ctx := context.Background()
			m := memory.New()
			st := &blockedRequests{Store: m, blocked: make(chan struct{}, 1), unblock: make(chan struct{})}
			w := newCounting(t, Config{Records: st, Leases: m, Strategy: s}, 10)
			st.key = w.reqKey("i", "b")
			other := newCounting(t, Config{Records: m, Strategy: Optimistic}, 10)
			_, x, b := movedOnWhileWaiting(t, ctx, w, other)
			c := transitionAsync(ctx, w, "1", "2", "uc", "c")
			waitTurns(t, w, "i", 2)
			x.done(true)
			<-st.blocked // b checks its request id
			select {
			case r := <-c:
				if r.err != nil || r.r.Outcome != Applied || r.r.Version != 2 {
					t.Fatalf("c: %+v", r)
				}
			case <-time.After(10 * time.Second):
				close(st.unblock)
				t.Fatal("c did not apply while b checked its request id")
			}
			close(st.unblock)
			if r := <-b; r.err != nil || r.r.Outcome != AlreadyDone || r.r.Entry.RequestID != "o" {
				t.Fatalf("b: %+v", r)
			}
		})
	}
}
