package workflow

import (
	"context"
	"errors"
	"time"
)

// turns makes the transitions of one instance in this process take turns,
// one at a time, in the order their request ids FIRST arrived: a caller
// told that the instance moved on (already-done, wrong state) who asks
// again with the same request id keeps its place instead of going to the
// back. Optimistic, Pessimistic and Lease take a turn before they write,
// so that this process's callers never race each other for the store (no
// conflicts to retry among them, no herd polling the lease) and none of
// them waits behind more than the callers that arrived before it.
//
// It is in memory only: no I/O, and nothing about correctness depends on
// it (every write is still conditioned on the version read).
type turns struct {
	held    bool
	waiting []*turnWaiter
	// arrived is when each request id seen lately first arrived (seq, in
	// arrival order) and last asked; an entry goes when its request gets
	// a final answer, or when it has not asked again for a while.
	arrived map[string]turnArrival
	seq     uint64
	pruned  time.Time
}

type turnWaiter struct {
	seq     uint64
	granted chan struct{} // closed when the turn is this waiter's
}

type turnArrival struct {
	seq  uint64
	last time.Time
}

// turn is a turn taken; done passes it on.
type turn struct {
	w      *Workflows
	h      *hotInstance
	req    string
	seq    uint64 // its place
	passed bool   // done was called; guarded by h.mu
}

// takeTurn waits for c's turn on h: at once if no one of this process holds
// or awaits it, otherwise after every waiter whose request id arrived
// before c's. It returns ctx's error if ctx ends first (and then holds
// nothing).
func (w *Workflows) takeTurn(ctx context.Context, h *hotInstance, c *command) (*turn, error) {
	now := w.clock.Now()
	h.mu.Lock()
	t := &h.turns
	if t.arrived == nil {
		t.arrived = map[string]turnArrival{}
	}
	if now.Sub(t.pruned) > w.cfg.Window {
		t.pruned = now
		for r, a := range t.arrived {
			if now.Sub(a.last) > w.cfg.Window {
				delete(t.arrived, r)
			}
		}
	}
	a, seen := t.arrived[c.requestID]
	if !seen {
		t.seq++
		a.seq = t.seq
	}
	a.last = now
	t.arrived[c.requestID] = a
	if !t.held {
		t.held = true
		h.mu.Unlock()
		return &turn{w: w, h: h, req: c.requestID, seq: a.seq}, nil
	}
	wt := &turnWaiter{seq: a.seq, granted: make(chan struct{})}
	t.waiting = append(t.waiting, wt)
	h.mu.Unlock()
	select {
	case <-wt.granted:
		return &turn{w: w, h: h, req: c.requestID, seq: a.seq}, nil
	case <-ctx.Done():
		h.mu.Lock()
		for i, x := range t.waiting {
			if x == wt {
				t.waiting = append(t.waiting[:i:i], t.waiting[i+1:]...)
				h.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		h.mu.Unlock()
		// Granted meanwhile: pass it on.
		(&turn{w: w, h: h, req: c.requestID, seq: a.seq}).done(false)
		return nil, ctx.Err()
	}
}

// done passes the turn to the waiter whose request id arrived first (the
// first call; later ones only record final). final says the request got
// its final answer (anything but "the instance moved on": the caller will
// not ask again with it), so its place is forgotten.
func (t *turn) done(final bool) {
	h := t.h
	h.mu.Lock()
	defer h.mu.Unlock()
	tt := &h.turns
	if final {
		delete(tt.arrived, t.req)
	} else if !t.passed {
		// Keep its place for as long as a Window from now, even if it
		// waited longer than that for this turn.
		tt.arrived[t.req] = turnArrival{seq: t.seq, last: t.w.clock.Now()}
	}
	if t.passed {
		return
	}
	t.passed = true
	if len(tt.waiting) == 0 {
		tt.held = false
		return
	}
	first := 0
	for i, x := range tt.waiting {
		if x.seq < tt.waiting[first].seq {
			first = i
		}
	}
	next := tt.waiting[first]
	tt.waiting = append(tt.waiting[:first:first], tt.waiting[first+1:]...)
	close(next.granted) // held stays true: it is next's now
}

// forgetArrival forgets c's place after a final answer given without a
// turn (a refusal is not final: the caller asks again from where it was
// told the instance is).
func (w *Workflows) forgetArrival(h *hotInstance, c *command) {
	h.mu.Lock()
	delete(h.turns.arrived, c.requestID)
	h.mu.Unlock()
}

// final reports whether a strategy's answer ends its request: anything but
// a refusal (already-done, wrong state) after which the caller may ask
// again from the state it was told.
func final(res Result, err error) bool {
	if err == nil {
		return res.Outcome != AlreadyDone && res.Outcome != WrongState
	}
	var ws *WrongStateError
	return !errors.As(err, &ws)
}
