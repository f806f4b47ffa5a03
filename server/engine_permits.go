package server

// The engine (engine.go). Semaphores: waiting for one of a semaphore's
// permits in the engine, in arrival order.
//
// Permit I of semaphore NAME is the lease NAME/permit/I (the naming of
// leasehold.Semaphore). AcquirePermit takes a free permit below n, else
// queues the request in the semaphore's own queue (e.sems, one per
// semaphore name, in arrival order). When a permit is freed (release,
// force release, expiry, its session's end) and its lease has no waiters
// of its own, it goes to the first waiter of its semaphore that may take
// it: one whose n is above its index (a waiter with a smaller n does not
// take it, and the permit goes to the next that may). A semaphore's
// waiters count in Stats.Waiters and the waiters quota, are listed by
// Waiters of each permit they may take, and keep their place between two
// polls as a lease's waiters do (engine_park.go).

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
)

// PermitBackend is implemented by backends that take a semaphore's
// permits themselves (Engine, Proxy): the HTTP and RESP front ends use it
// for POST /v1/semaphores/{name}/acquire and LH.SEMACQUIRE.
type PermitBackend interface {
	// AcquirePermit takes one of the permits 0..n-1 of semaphore sem for
	// req (req.Name is ignored). With req.Wait > 0 it waits up to Wait in
	// the semaphore's queue, in arrival order. When every permit stays
	// held it returns an error that matches leasehold.ErrNoPermit and
	// wraps the *HeldError of the permit that expires first; ctx's end
	// is ctx's error (the waiter is dropped, a grant that raced with the
	// end released).
	AcquirePermit(ctx context.Context, sem string, n int, req AcquireRequest) (leasehold.Record, error)
}

var _ PermitBackend = (*Engine)(nil)

// validatePermits checks a semaphore's name and permit count: n in [1,
// MaxPermits], and the name of permit n-1 a valid name.
func validatePermits(sem string, n int) error {
	if n < 1 || n > leasehold.MaxPermits {
		return &leasehold.InvalidError{Field: "permits", Reason: fmt.Sprintf("%d must be in [1, %d]", n, leasehold.MaxPermits)}
	}
	if err := httpCheckName(sem); err != nil {
		return err
	}
	if httpCheckName(httpPermitName(sem, n-1)) != nil {
		return &leasehold.InvalidError{Field: "name", Reason: fmt.Sprintf("%q is too long to carry a permit suffix", sem)}
	}
	return nil
}

// noPermit is the refusal when all of sem's n permits are held.
func noPermit(sem string, n int, soonest *leasehold.HeldError) error {
	if soonest == nil { // every live permit is at or above n
		soonest = &leasehold.HeldError{Name: sem}
	}
	return fmt.Errorf("semaphore %q (%d permits): %w; the next to expire: %w", sem, n, leasehold.ErrNoPermit, soonest)
}

// AcquirePermit implements PermitBackend.
func (e *Engine) AcquirePermit(ctx context.Context, sem string, n int, req AcquireRequest) (leasehold.Record, error) {
	perr := validatePermits(sem, n)
	req.Name = httpPermitName(sem, 0)
	if err := e.lockOpen(perr, validateAcquire(req), ctx.Err()); err != nil {
		return leasehold.Record{}, err
	}
	now := e.now()
	sess, err := e.liveSessionLocked(req.Session, now)
	if err != nil {
		e.unlock()
		return leasehold.Record{}, err
	}
	if w := e.unparkPermit(sem, req); w != nil {
		e.unlock()
		return e.waitPermit(ctx, w)
	}
	free, mine := -1, (*engEntry)(nil)
	for i := 0; i < n; i++ {
		ent := e.leases[httpPermitName(sem, i)]
		if ent != nil {
			e.expireIfDue(ent, now)
		}
		switch {
		case ent.live(now):
			if req.RequestID != "" && ent.reqID() == req.RequestID && ent.owner == req.Owner {
				mine = ent
			}
		case ent != nil && len(ent.queue()) > 0:
			// Its own waiters come first.
		case free < 0:
			free = i
		}
	}
	ch := grantChans.Get().(chan grantResult)
	switch {
	case mine != nil:
		// A retried acquire: the permit it got, with a fresh expiry.
		req.Name = mine.name
		e.refresh(mine, req, sess, now, sendTo(ch))
	case free >= 0:
		req.Name = httpPermitName(sem, free)
		ent := e.leases[req.Name]
		if ent == nil {
			ent = newEntry(req.Name)
			e.leases[req.Name] = ent
		}
		e.grant(ent, req, sess, now, 0, sendTo(ch))
	case req.Wait <= 0:
		grantChans.Put(ch)
		return leasehold.Record{}, e.refusePermit(sem, n, now)
	default:
		grantChans.Put(ch)
		w := &engWaiter{req: req, sess: sess, since: e.clk.Now(), at: now, ch: make(chan grantResult, 1), sem: sem, n: n}
		q := e.sems[sem]
		if q == nil {
			q = new([]*engWaiter)
			e.sems[sem] = q
		}
		*q = append(*q, w)
		e.waiters++
		if sess != nil {
			sess.waits[w] = struct{}{}
		}
		k := len(*q)
		e.commit(nil, nil, func(error) {
			e.emit(Event{Type: EventQueued, Name: sem, Owner: req.Owner, Time: w.since, Waiters: k})
		})
		e.unlock()
		return e.waitPermit(ctx, w)
	}
	e.unlock()
	r := <-ch
	grantChans.Put(ch)
	return r.rec, r.err
}

// refusePermit refuses an acquire of sem's n permits, all held, naming
// the holder whose grant expires first, once that grant is durable (see
// settle). e.mu held; it unlocks.
func (e *Engine) refusePermit(sem string, n int, now int64) error {
	var soonest *engEntry
	for i := 0; i < n; i++ {
		ent := e.leases[httpPermitName(sem, i)]
		if ent.live(now) && (soonest == nil || ent.remaining(now) < soonest.remaining(now)) {
			soonest = ent
		}
	}
	if soonest == nil {
		return e.refuse(nil, noPermit(sem, n, nil))
	}
	return e.refuse(soonest, noPermit(sem, n, soonest.heldError(now)))
}

// waitPermit blocks a semaphore's waiter until it is granted, its wait
// ends, or ctx ends (as wait does for a lease's waiter).
func (e *Engine) waitPermit(ctx context.Context, w *engWaiter) (leasehold.Record, error) {
	t := e.clk.NewTimer(w.req.Wait)
	defer t.Stop()
	select {
	case r := <-w.ch:
		return r.rec, r.err
	case <-ctx.Done():
	case <-t.C():
	}
	e.lock()
	now := e.now()
	if !w.done && ctx.Err() == nil && !e.closed {
		// An expiry due at this very moment goes to the head waiter
		// first, perhaps this one (see wait).
		for i := 0; i < w.n && !w.done; i++ {
			if ent := e.leases[httpPermitName(w.sem, i)]; ent != nil {
				e.expireIfDue(ent, now)
			}
		}
	}
	if !w.done {
		if ctx.Err() == nil && e.canPark(w) {
			e.park(w)
		} else {
			e.dequeuePermit(w)
		}
		if err := ctx.Err(); err != nil {
			e.unlock()
			return leasehold.Record{}, err
		}
		return leasehold.Record{}, e.refusePermit(w.sem, w.n, now)
	}
	e.unlock()
	r := <-w.ch
	if r.err != nil || ctx.Err() == nil {
		return r.rec, r.err
	}
	// The caller is gone: free the grant it will never learn of.
	_ = e.Release(context.Background(), r.rec.Name, r.rec.Owner, r.rec.Token)
	return leasehold.Record{}, ctx.Err()
}

// unparkPermit is unpark for a semaphore's waiter.
func (e *Engine) unparkPermit(sem string, req AcquireRequest) *engWaiter {
	if len(e.parked) == 0 || req.RequestID == "" {
		return nil
	}
	key := permitParkKey(sem, req.Owner, req.RequestID)
	w := e.parked[key]
	if w == nil {
		return nil
	}
	delete(e.parked, key)
	w.parked = false
	w.endGrace()
	if w.done {
		return nil // granted meanwhile: the retry finds its permit
	}
	if req.Wait <= 0 || req.Session != w.req.Session {
		e.dequeuePermit(w)
		return nil
	}
	req.Name = w.req.Name
	w.req = req
	return w
}

// dequeuePermit removes a semaphore's waiter that leaves without a grant.
// e.mu held.
func (e *Engine) dequeuePermit(w *engWaiter) {
	if w.done {
		return
	}
	w.done = true
	q := e.sems[w.sem]
	k := 0
	if q != nil {
		for i, x := range *q {
			if x == w {
				*q = append((*q)[:i], (*q)[i+1:]...)
				break
			}
		}
		if k = len(*q); k == 0 {
			delete(e.sems, w.sem)
		}
	}
	e.waiters--
	if w.sess != nil {
		delete(w.sess.waits, w)
	}
	e.commit(nil, nil, func(error) {
		e.emit(Event{Type: EventDequeued, Name: w.sem, Owner: w.req.Owner, Time: e.clk.Now(), Waiters: k})
	})
}

// permitOf splits a permit's lease name into its semaphore and index.
func permitOf(name string) (sem string, i int, ok bool) {
	at := strings.LastIndex(name, httpPermitSep)
	if at < 0 {
		return "", 0, false
	}
	sem = name[:at]
	i, ok = httpPermitIndex(sem, name)
	return sem, i, ok
}

// handPermit gives the freed permit ent to the first waiter of its
// semaphore that may take it, and reports whether one did. e.mu held.
func (e *Engine) handPermit(ent *engEntry, now int64) bool {
	sem, i, ok := permitOf(ent.name)
	if !ok {
		return false
	}
	q := e.sems[sem]
	if q == nil {
		return false
	}
	for at, w := range *q {
		if w.n <= i {
			continue
		}
		*q = append((*q)[:at], (*q)[at+1:]...)
		if len(*q) == 0 {
			delete(e.sems, sem)
		}
		e.waiters--
		w.done = true
		if w.sess != nil {
			delete(w.sess.waits, w)
		}
		req := w.req
		req.Name = ent.name
		e.grant(ent, req, w.sess, now, now, w.give)
		w.token, w.got = ent.token, ent.name
		return true
	}
	return false
}

// permitWaiters are the waiters of the semaphore whose permit name is,
// that may take it, in arrival order. e.mu held.
func (e *Engine) permitWaiters(name string) []*engWaiter {
	if len(e.sems) == 0 {
		return nil
	}
	sem, i, ok := permitOf(name)
	if !ok {
		return nil
	}
	q := e.sems[sem]
	if q == nil {
		return nil
	}
	var out []*engWaiter
	for _, w := range *q {
		if w.n > i {
			out = append(out, w)
		}
	}
	return out
}

// queuedOn is how many wait for ent: its own waiters and its semaphore's
// that may take it (an event's Waiters). e.mu held.
func (e *Engine) queuedOn(ent *engEntry) int {
	return len(ent.queue()) + len(e.permitWaiters(ent.name))
}

// waiterOf describes w for Waiters.
func waiterOf(w *engWaiter, now int64) Waiter {
	return Waiter{Owner: w.req.Owner, Session: w.req.Session, Since: w.since, Waited: time.Duration(now - w.at)}
}
