package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

// gatedStore lets one Txn through per permit (every one once permit is
// closed), says on entered when one arrives, and counts them.
type gatedStore struct {
	*memory.Store
	permit  chan struct{}
	entered chan struct{}
	txns    atomic.Int64
}

func newGatedStore() *gatedStore {
	return &gatedStore{Store: memory.New(), permit: make(chan struct{}), entered: make(chan struct{}, 10)}
}

func (g *gatedStore) Txn(ctx context.Context, t leasehold.Txn) (leasehold.TxnResult, error) {
	g.txns.Add(1)
	g.entered <- struct{}{}
	<-g.permit
	return g.Store.Txn(ctx, t)
}

func chain(name string) Definition {
	return Definition{Name: name, Initial: "A", Transitions: map[string][]string{
		"A": {"B"}, "B": {"C"}, "C": {"D"}, "D": {"A"},
	}}
}

func queued(t *testing.T, w *Workflows, id string) {
	h := w.acquireHot(id)
	h.mu.Lock()
	for range 50 { // a window full of conflicts
		w.recordLocked(h, true)
	}
	h.mu.Unlock()
	w.releaseHot(h)
}

// newQueued is a workflow with the adaptive strategy whose instance "i"
// is already moved to the queue.
func newQueued(t *testing.T, name string, cfg Config) *Workflows {
	t.Helper()
	cfg.Strategy, cfg.Window = Adaptive, time.Hour
	w, err := New(chain(name), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(context.Background(), "i"); err != nil {
		t.Fatal(err)
	}
	queued(t, w, "i")
	return w
}

// res is the answer to a transition started by transitionAsync.
type res struct {
	r   Result
	err error
}

// transitionAsync starts a transition of "i" and gives its answer later.
func transitionAsync(ctx context.Context, w *Workflows, from, to, actor, req string) chan res {
	ch := make(chan res, 1)
	go func() {
		r, err := w.Transition(ctx, "i", from, to, actor, req)
		ch <- res{r, err}
	}()
	return ch
}

// TestQueueBatches: transitions waiting behind a transaction are applied
// in arrival order, several in one transaction, each checked against the
// state the previous one leaves; refusals in the batch are reported per
// command.
func TestQueueBatches(t *testing.T) {
	ctx := context.Background()
	g := newGatedStore()
	w := newQueued(t, "q", Config{Records: g, LocalQueue: true})
	out := make([]chan res, 5)
	call := func(i int, from, to, req string) {
		out[i] = transitionAsync(ctx, w, from, to, fmt.Sprint("u", i), req)
	}
	call(0, "A", "B", "r0")
	<-g.entered // the head is in its first transaction
	call(1, "B", "C", "r1")
	waitQueue(t, w, "i", 1)
	call(2, "B", "C", "r2") // same move as r1, later: already done by r1
	waitQueue(t, w, "i", 2)
	call(3, "A", "B", "r3") // from a state left behind: wrong state
	waitQueue(t, w, "i", 3)
	call(4, "C", "D", "r4")
	waitQueue(t, w, "i", 4)
	close(g.permit)
	got := make([]res, 5)
	for i := range got {
		got[i] = <-out[i]
	}
	if got[0].r.Outcome != Applied || got[1].r.Outcome != Applied || got[4].r.Outcome != Applied {
		t.Fatalf("applied: %+v / %+v / %+v", got[0], got[1], got[4])
	}
	if got[2].err != nil || got[2].r.Outcome != AlreadyDone || got[2].r.Entry.RequestID != "r1" {
		t.Fatalf("r2: %+v", got[2])
	}
	var ws *WrongStateError
	if !errors.As(got[3].err, &ws) || ws.Current != "C" {
		t.Fatalf("r3: %+v", got[3])
	}
	if n := g.txns.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2 (the first, then r1..r4 in one)", n)
	}
	in, _ := w.Get(ctx, "i")
	h, _ := w.History(ctx, "i")
	if in.State != "D" || in.Version != 3 || len(h) != 3 || h[1].RequestID != "r1" || h[2].RequestID != "r4" || h[2].Strategy != Queued {
		t.Fatalf("instance %+v history %+v", in, h)
	}
}

// waitQueue waits until id's queue holds n transitions.
func waitQueue(t *testing.T, w *Workflows, id string, n int) {
	t.Helper()
	waitHot(t, w, id, n, "queue never reached %d", func(h *hotInstance) int { return len(h.q) })
}

// TestQueueRepeats: in the queue, a request refused, then applied, then
// sent again is answered "repeated", even though the queue remembered it
// as not applied.
func TestQueueRepeats(t *testing.T) {
	ctx := context.Background()
	m := memory.New()
	w := newQueued(t, "rep", Config{Records: m, Leases: m})
	// One head per call here (the queue empties between calls), a shared
	// head below.
	if _, err := w.Transition(ctx, "i", "B", "C", "x", "late"); !errors.Is(err, ErrWrongState) {
		t.Fatal(err)
	}
	if r, err := w.Transition(ctx, "i", "A", "B", "x", "late"); err != nil || r.Outcome != Applied {
		t.Fatal(r, err)
	}
	if r, err := w.Transition(ctx, "i", "B", "C", "y", "next"); err != nil || r.Outcome != Applied {
		t.Fatal(r, err)
	}
	if r, err := w.Transition(ctx, "i", "A", "B", "x", "late"); err != nil || r.Outcome != Repeated || r.Version != 1 {
		t.Fatalf("%+v %v", r, err)
	}

	// A shared head: many callers at once, each refused request asked
	// again, then every request sent once more: all repeated.
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := map[string]string{}
	for i := range 30 {
		wg.Go(func() {
			req := fmt.Sprint("c", i)
			in, _ := w.Get(ctx, "i")
			state := in.State
			for {
				to := chain("").Transitions[state][0]
				r, err := w.Transition(ctx, "i", state, to, "z", req)
				var ws *WrongStateError
				if errors.As(err, &ws) {
					state = ws.Current
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if r.Outcome == AlreadyDone {
					state = r.State
					continue
				}
				mu.Lock()
				applied[req] = state
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	for req, from := range applied {
		to := chain("").Transitions[from][0]
		r, err := w.Transition(ctx, "i", from, to, "z", req)
		if err != nil || r.Outcome != Repeated {
			t.Fatalf("%s again: %+v %v", req, r, err)
		}
	}
	if h, _ := w.History(ctx, "i"); len(h) != 32 {
		t.Fatalf("history has %d entries, want 32", len(h))
	}
}

// TestQueueRemembersApplied: within one head's run, a request the queue
// refused (and so knows unapplied), then applied, then sent again after
// another transition, is answered "repeated", not refused.
func TestQueueRemembersApplied(t *testing.T) {
	ctx := context.Background()
	p := newGatedStore()
	w := newQueued(t, "mem", Config{Records: p, LocalQueue: true})
	queueLen := 0
	start := func(from, to, req string) chan res {
		return transitionAsync(ctx, w, from, to, "u", req)
	}
	call := func(from, to, req string) chan res { // queued behind a blocked Txn
		ch := start(from, to, req)
		queueLen++
		waitQueue(t, w, "i", queueLen)
		return ch
	}
	step := func(what string) { // let the blocked Txn through and wait for the next
		t.Helper()
		p.permit <- struct{}{}
		select {
		case <-p.entered:
		case <-time.After(time.Minute):
			t.Fatalf("no transaction after %s", what)
		}
		queueLen = 0
	}
	get := func(ch chan res) res {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(time.Minute):
			t.Fatal("no answer")
		}
		return res{}
	}
	r0 := start("A", "B", "r0")
	<-p.entered                // Txn 1: r0
	y1 := call("D", "A", "y")  // refused in batch 2 (the instance is at B)
	x1 := call("C", "D", "x")  // refused in batch 2
	r1 := call("B", "C", "r1") // applied in batch 2
	step("r0")                 // Txn 2: y and x checked, r1 applied
	x2 := call("C", "D", "x")  // applied in batch 3
	step("batch 2")            // Txn 3
	if r := get(r0); r.r.Outcome != Applied {
		t.Fatal(r)
	}
	if r := get(y1); !errors.Is(r.err, ErrWrongState) {
		t.Fatalf("y first: %+v", r)
	}
	if r := get(x1); !errors.Is(r.err, ErrWrongState) {
		t.Fatalf("x first: %+v", r)
	}
	y2 := call("D", "A", "y") // first in batch 4 (y arrived before x)
	x3 := call("C", "D", "x") // the repeat, after y
	step("batch 3")           // Txn 4: y applied, x checked: fails on x's record
	if r := get(r1); r.r.Outcome != Applied {
		t.Fatal(r)
	}
	if r := get(x2); r.r.Outcome != Applied {
		t.Fatalf("x second: %+v", r)
	}
	step("batch 4") // Txn 5: y applied
	close(p.permit)
	if r := get(y2); r.r.Outcome != Applied {
		t.Fatalf("y: %+v", r)
	}
	if r := get(x3); r.err != nil || r.r.Outcome != Repeated || r.r.Version != 3 {
		t.Fatalf("x repeated: %+v", r)
	}
}
