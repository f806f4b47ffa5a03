package server

// The engine (engine.go). The expiry loop and its deadline heap.

import (
	"container/heap"
	"math"
	"time"
)

// pokeIfEarlier wakes the expiry loop if the earliest deadline is now before the
// time it means to wake (deadlines set at now + TTL rarely are). e.mu held.
func (e *Engine) pokeIfEarlier() {
	if len(e.dl) > 0 && e.dl[0].at < e.wake {
		e.wake = e.dl[0].at
		e.poke()
	}
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
		for len(e.dl) > 0 && e.dl[0].at <= now {
			d := e.dl[0]
			switch {
			case d.ent != nil:
				e.expireIfDue(d.ent, now)
			case d.sess != nil && !d.sess.ended:
				e.endSession(d.sess, now, EventExpired, nil)
			}
			if d.idx >= 0 && d.at <= now {
				e.dl.remove(d) // nothing left to end
			}
		}
		e.sweepTombs(now)
		e.maybeSnapshot()
		wait := time.Duration(math.MaxInt64)
		if len(e.dl) > 0 {
			wait = time.Duration(e.dl[0].at - now)
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

// deadline is an entry's or a session's place in the expiry heap.
type deadline struct {
	at   int64
	idx  int
	ent  *engEntry
	sess *engSession
}

type deadlines []*deadline

func (h deadlines) Len() int { return len(h) }

func (h deadlines) Less(i, j int) bool { return h[i].at < h[j].at }

func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *deadlines) Push(x any) {
	d := x.(*deadline)
	d.idx = len(*h)
	*h = append(*h, d)
}

func (h *deadlines) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.idx = -1
	return d
}

func (h *deadlines) set(d *deadline, at int64) {
	d.at = at
	if d.idx >= 0 && d.idx < len(*h) && (*h)[d.idx] == d {
		heap.Fix(h, d.idx)
		return
	}
	heap.Push(h, d)
}

func (h *deadlines) remove(d *deadline) {
	if d.idx >= 0 && d.idx < len(*h) && (*h)[d.idx] == d {
		heap.Remove(h, d.idx)
	}
	d.idx = -1
}
