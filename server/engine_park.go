package server

// The engine (engine.go). Parked waiters: a waiter keeps its place in a
// name's queue between two of its long-polls.
//
// HTTP and RESP clients wait in polls of at most MaxWait (30 s by default
// in the clients), repeating the request with the same request id until
// they are granted. Without parking, each poll's end dropped the waiter
// and the next poll queued it again at the back, so a waiter that had
// waited longest could be granted after one that came later, and waiters'
// ages restarted at every poll. Now a waiter with a request id whose poll
// runs out (not one whose caller went away) stays in the queue, parked,
// for ParkGrace; the same owner's next acquire of the name with the same
// request id takes the place back, granted or still waiting. A parked
// waiter that reaches the head is granted as any other (the retry then
// gets that grant, as any retry with its request id does); a parked waiter
// that nobody takes back within the grace leaves the queue, and a grant it
// got meanwhile is released.

import (
	"context"
	"time"
)

// ParkGrace is how long a waiter whose poll ran out keeps its place for
// its next poll.
const ParkGrace = 5 * time.Second

const (
	// minParkWait: only a poll that waited at least this long parks (a
	// client's long-poll; not a rapid series of short waits).
	minParkWait = time.Second
	// maxParked bounds the parked waiters of an engine; over it a poll's
	// end drops the waiter as before.
	maxParked = 100_000
)

// parkKey names a waiter for its next poll. Names and owners hold no NUL
// (check.Name, check.Owner).
func parkKey(name, owner, requestID string) string {
	return name + "\x00" + owner + "\x00" + requestID
}

// permitParkKey names a semaphore's waiter for its next poll: the NUL
// keeps it apart from every lease's key.
func permitParkKey(sem, owner, requestID string) string {
	return parkKey(sem, owner, requestID) + "\x00permit"
}

// parkKey is w's key in e.parked.
func (w *engWaiter) parkKey() string {
	if w.sem != "" {
		return permitParkKey(w.sem, w.req.Owner, w.req.RequestID)
	}
	return parkKey(w.req.Name, w.req.Owner, w.req.RequestID)
}

// canPark reports whether a waiter whose poll ran out keeps its place.
// e.mu held.
func (e *Engine) canPark(w *engWaiter) bool {
	return w.req.RequestID != "" && w.req.Wait >= minParkWait && len(e.parked) < maxParked && !e.closed
}

// park keeps w in ent's queue for its next poll and starts the grace that
// ends the place if no poll comes. e.mu held.
func (e *Engine) park(w *engWaiter) {
	key := w.parkKey()
	if old := e.parked[key]; old != nil && old != w && !old.done {
		e.leave(old)
	}
	w.parked = true
	taken := make(chan struct{})
	w.taken = taken
	e.parked[key] = w
	// The grace's timer starts here, not in the goroutine: the grace runs
	// from the park, and a test's fake clock counts it from the moment the
	// poll has returned (CI run 85: TestEngineParkLimits counted no timer
	// left, started the next waiter, and the late grace timer's appearance
	// let it move the clock before that waiter's own timer existed: the
	// waiter waited forever).
	t := e.clk.NewTimer(ParkGrace)
	w.grace = t
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
		case <-taken:
			return
		case <-e.stop:
			return
		}
		e.lock()
		if e.parked[key] != w {
			e.unlock() // taken back, or replaced
			return
		}
		delete(e.parked, key)
		w.parked = false
		if !w.done {
			e.leave(w)
			e.unlock()
			return
		}
		token, got := w.token, w.got
		e.unlock()
		if token != 0 {
			// Granted while parked and never taken: nobody will use it.
			_ = e.Release(context.Background(), got, w.req.Owner, token)
		}
	}()
}

// endGrace ends the grace of w's parked place, taken back: its timer
// stops here, not later in its goroutine, so that it no longer runs once
// the place is back (a test that counts a fake clock's timers took the
// stale grace timer for the next poll's and moved the clock before that
// poll's timer existed). e.mu held.
func (w *engWaiter) endGrace() {
	w.grace.Stop()
	close(w.taken)
}

// unpark takes back the place of a parked waiter for req, if there is one:
// a waiting request carries on waiting in it (the returned waiter); a try,
// or a request with another session, leaves it. A place granted meanwhile
// is answered by the caller's retry case (same owner and request id).
// e.mu held.
func (e *Engine) unpark(ent *engEntry, req AcquireRequest) *engWaiter {
	if len(e.parked) == 0 || req.RequestID == "" {
		return nil
	}
	key := parkKey(req.Name, req.Owner, req.RequestID)
	w := e.parked[key]
	if w == nil {
		return nil
	}
	delete(e.parked, key)
	w.parked = false
	w.endGrace()
	if w.done {
		return nil
	}
	if req.Wait <= 0 || req.Session != w.req.Session || ent == nil {
		if ent != nil {
			e.dequeue(ent, w)
		}
		return nil
	}
	w.req = req
	return w
}
