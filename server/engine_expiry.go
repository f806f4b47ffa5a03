package server

// The engine (engine.go). The expiry loop and its deadline heap.

import (
	"math"
	"time"
)

// pokeIfEarlier wakes the expiry loop if the earliest deadline is now before the
// time it means to wake (deadlines set at now + TTL rarely are). e.mu held.
func (e *Engine) pokeIfEarlier() {
	if at, ok := e.nextDeadline(); ok && at < e.wake {
		e.wake = at
		e.poke()
	}
}

// nextDeadline returns the earliest deadline of a lease or a session, if
// there is one. e.mu held.
func (e *Engine) nextDeadline() (int64, bool) {
	switch {
	case len(e.dl) > 0 && len(e.sdl) > 0:
		return min(e.dl[0].dl.at, e.sdl[0].dl.at), true
	case len(e.dl) > 0:
		return e.dl[0].dl.at, true
	case len(e.sdl) > 0:
		return e.sdl[0].dl.at, true
	}
	return 0, false
}

// poke wakes the expiry loop. e.mu held.
func (e *Engine) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// expiryLoop ends grants and sessions whose time ran out, handing leases to
// their waiters, and takes snapshots when the log has grown.
func (e *Engine) expiryLoop() {
	defer close(e.loopDone)
	for {
		e.lock()
		now := e.now()
		// Whatever is due, leases and sessions, earliest first.
		for at, ok := e.nextDeadline(); ok && at <= now; at, ok = e.nextDeadline() {
			if len(e.dl) > 0 && e.dl[0].dl.at == at {
				ent := e.dl[0]
				e.expireIfDue(ent, now)
				if e.dl.has(ent) && ent.dl.at <= now {
					e.dl.remove(ent) // nothing left to end
				}
				continue
			}
			s := e.sdl[0]
			if !s.ended {
				e.endSession(s, now, EventExpired, nil)
			}
			if e.sdl.has(s) && s.dl.at <= now {
				e.sdl.remove(s) // nothing left to end
			}
		}
		e.sweepTombs(now)
		e.maybeSnapshot()
		wait := time.Duration(math.MaxInt64)
		if at, ok := e.nextDeadline(); ok {
			wait = time.Duration(at - now)
		}
		if len(e.tombs) > 0 {
			wait = min(wait, e.cfg.TombstoneTTL)
		}
		wait = min(wait, time.Minute)
		e.wake = now + int64(wait)
		e.unlock()
		t := e.clk.NewTimer(wait)
		select {
		case <-e.stop:
			t.Stop()
			return
		case <-e.kick:
			t.Stop()
		case <-t.C():
		}
	}
}

// deadline is an entry's or a session's place in its expiry heap: when it
// is due, and its index in the heap's slice (-1 when not in it).
type deadline struct {
	at  int64
	idx int32
}

// timed is what an expiry heap holds: *engEntry or *engSession.
type timed interface {
	comparable
	deadline() *deadline
}

func (ent *engEntry) deadline() *deadline { return &ent.dl }

func (s *engSession) deadline() *deadline { return &s.dl }

// deadlines is a binary min-heap of deadlines, earliest first, in a plain
// slice: one pointer per element and no allocation per entry.
type deadlines[T timed] []T

// has reports whether x is in h.
func (h deadlines[T]) has(x T) bool {
	i := x.deadline().idx
	return i >= 0 && int(i) < len(h) && h[i] == x
}

// set makes x due at at, adding it to h if it is not in it.
func (h *deadlines[T]) set(x T, at int64) {
	d := x.deadline()
	old := d.at
	d.at = at
	if h.has(x) {
		if at < old {
			h.up(int(d.idx))
		} else {
			h.down(int(d.idx))
		}
		return
	}
	d.idx = int32(len(*h))
	*h = append(*h, x)
	h.up(int(d.idx))
}

// remove takes x out of h, if it is in it.
func (h *deadlines[T]) remove(x T) {
	if !h.has(x) {
		x.deadline().idx = -1
		return
	}
	i := int(x.deadline().idx)
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	(*h)[last] = zero
	*h = (*h)[:last]
	x.deadline().idx = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
	if c := cap(*h); c > 1024 && len(*h) < c/4 {
		*h = append(deadlines[T](nil), (*h)...) // give back the room of a drained heap
	}
}

// heapify restores the heap order of h after elements were appended in
// any order (recovery: one pass, O(n)).
func (h deadlines[T]) heapify() {
	for i := range h {
		h[i].deadline().idx = int32(i)
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h deadlines[T]) less(i, j int) bool { return h[i].deadline().at < h[j].deadline().at }

func (h deadlines[T]) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].deadline().idx = int32(i)
	h[j].deadline().idx = int32(j)
}

func (h deadlines[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlines[T]) down(i int) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}
