package server

// The proxy (proxy.go). Acquire and the wait queue: waiters take their turn in arrival order and retry the store at its head.

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/backoff"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

type proxyWaiter struct {
	owner, session string
	since          time.Time
	turn           chan struct{} // closed when the waiter becomes head
}

// Acquire implements Backend. Without Wait it is one TryAcquire on the
// store (it does not queue, and so may overtake queued waiters when the
// lease is free). With Wait it queues behind this proxy's earlier waiters
// on the name.
func (p *Proxy) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	r := req.AcquireRequest
	if err := firstError(storekit.ValidateName(r.Name), storekit.ValidateOwner(r.Owner),
		storekit.ValidateRequestID(r.RequestID), storekit.ValidateData(r.Data)); err != nil {
		return leasehold.Record{}, err
	}
	if req.Wait < 0 {
		return leasehold.Record{}, invalidf("wait", req.Wait.String()+" is negative")
	}
	var sess *proxySession
	if req.Session != "" {
		p.mu.Lock()
		sess = p.liveSessionLocked(req.Session)
		p.mu.Unlock()
		if sess == nil {
			return leasehold.Record{}, ErrNoSession
		}
		if r.TTL == 0 {
			r.TTL = sess.ttl
		}
	}
	if err := storekit.ValidateTTL(r.TTL); err != nil {
		return leasehold.Record{}, err
	}
	if p.isClosed() {
		return leasehold.Record{}, leasehold.ErrClosed
	}
	ns := p.ref(r.Name)
	defer p.unref(ns)
	if req.Wait == 0 {
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err != nil {
			return leasehold.Record{}, err
		}
		return p.attach(sess, rec, r.TTL, t0)
	}
	if r.RequestID == "" {
		// One id for all attempts: a lost reply is recognised, and a grant
		// that races with cancellation can be found and released.
		r.RequestID = randid.Hex(12)
	}
	return p.wait(ctx, ns, r, req, sess)
}

// try makes one TryAcquire under the name's lock and reports a grant. w, if
// set, is the queued waiter making the attempt: on a grant it leaves the
// queue and the next waiter becomes head at once; handoff (called with
// p.mu held) gives the grant's Handoff. t0 is the clock before the request.
func (p *Proxy) try(ctx context.Context, ns *proxyName, req leasehold.AcquireRequest, w *proxyWaiter, handoff func(now time.Time) time.Duration) (leasehold.Record, time.Time, error) {
	if err := ns.lock(ctx); err != nil {
		return leasehold.Record{}, time.Time{}, err
	}
	defer ns.unlock()
	t0 := p.clock.Now()
	rec, err := p.store.TryAcquire(ctx, req)
	if err != nil {
		var held *leasehold.HeldError
		if errors.As(err, &held) {
			p.mu.Lock()
			ns.lastHeld, ns.lastHeldAt = held, p.clock.Now()
			p.mu.Unlock()
		}
		return rec, t0, err
	}
	p.held.Add(1)
	p.mu.Lock()
	now := p.clock.Now()
	ev := Event{Type: EventGranted, Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Time: now}
	if w != nil {
		p.removeWaiterLocked(ns, w)
		if handoff != nil {
			ev.Handoff = handoff(now)
		}
	}
	ns.lastHeld, ns.lastHeldAt = proxyHeld(rec), now
	p.emitUnlock(ev)
	return rec, t0, nil
}

func proxyHeld(rec leasehold.Record) *leasehold.HeldError {
	return &leasehold.HeldError{Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Remaining: rec.Remaining, Acquired: rec.Acquired}
}

// enqueue appends w to the name's queue; if it is alone it is head at once.
func (p *Proxy) enqueue(ns *proxyName, w *proxyWaiter) {
	p.mu.Lock()
	ns.queue = append(ns.queue, w)
	p.waiting++
	if len(ns.queue) == 1 {
		close(w.turn)
	}
	p.emitUnlock(Event{Type: EventQueued, Name: ns.name, Owner: w.owner})
}

// removeWaiterLocked takes w out of the queue (if it is there) and makes
// the next waiter head if w was.
func (p *Proxy) removeWaiterLocked(ns *proxyName, w *proxyWaiter) bool {
	for i, o := range ns.queue {
		if o != w {
			continue
		}
		ns.queue = append(ns.queue[:i], ns.queue[i+1:]...)
		p.waiting--
		if i == 0 && len(ns.queue) > 0 {
			close(ns.queue[0].turn)
		}
		return true
	}
	return false
}

// leave drops w from the queue without a grant.
func (p *Proxy) leave(ns *proxyName, w *proxyWaiter) {
	p.mu.Lock()
	if !p.removeWaiterLocked(ns, w) {
		p.mu.Unlock()
		return
	}
	p.emitUnlock(Event{Type: EventDequeued, Name: ns.name, Owner: w.owner})
}

// wait is Acquire with Wait > 0.
func (p *Proxy) wait(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	waitEnd := p.clock.NewTimer(req.Wait)
	defer waitEnd.Stop()
	var sessDone <-chan struct{}
	if sess != nil {
		sessDone = sess.done
	}

	// Nobody queued here: try at once, without joining the queue.
	p.mu.Lock()
	empty := len(ns.queue) == 0
	p.mu.Unlock()
	var lastErr error
	if empty {
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err == nil {
			return p.finishWait(ctx, sess, rec, r, t0)
		}
		if e := p.tryFailed(ctx, r, err); e != nil {
			return leasehold.Record{}, e
		}
		lastErr = err
	}

	w := &proxyWaiter{owner: r.Owner, session: req.Session, since: p.clock.Now(), turn: make(chan struct{})}
	p.enqueue(ns, w)
	granted := false
	defer func() {
		if !granted {
			p.leave(ns, w)
		}
	}()

	select {
	case <-w.turn:
	case <-ctx.Done():
		return leasehold.Record{}, ctx.Err()
	case <-waitEnd.C():
		return p.timedOut(ctx, ns, r, sess, lastErr)
	case <-p.done:
		return leasehold.Record{}, leasehold.ErrClosed
	case <-sessDone:
		return leasehold.Record{}, ErrNoSession
	}

	// Head of the queue: only this waiter tries the store.
	var notify <-chan struct{}
	if p.watcher != nil {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if ch, err := p.watcher.Watch(wctx, r.Name); err == nil {
			notify = ch
		} else {
			p.log.Warn("leasehold proxy: watch failed, polling instead", "name", r.Name, "err", err)
		}
	}
	bo := backoff.New(p.cfg.BackoffMin, p.cfg.BackoffMax)
	var seenHeldAt, notifyAt, expiryAt time.Time
	handoff := func(now time.Time) time.Duration { // p.mu held
		from := w.since
		if !seenHeldAt.IsZero() {
			from = seenHeldAt
		}
		switch {
		case ns.releasedAt.After(from):
			from = ns.releasedAt
		case notifyAt.After(from):
			from = notifyAt
		case !expiryAt.IsZero() && expiryAt.After(from) && !expiryAt.After(now):
			from = expiryAt
		}
		return max(now.Sub(from), 0)
	}
	for {
		rec, t0, err := p.try(ctx, ns, r, w, handoff)
		if err == nil {
			granted = true
			return p.finishWait(ctx, sess, rec, r, t0)
		}
		if e := p.tryFailed(ctx, r, err); e != nil {
			return leasehold.Record{}, e
		}
		lastErr = err
		var wait time.Duration
		var held *leasehold.HeldError
		if errors.As(err, &held) {
			now := p.clock.Now()
			seenHeldAt, expiryAt = now, now.Add(held.Remaining)
			until := held.Remaining + time.Millisecond
			if notify != nil {
				wait = until // a release arrives by push; expiry by this timer
			} else {
				wait = min(bo.Next(), until)
			}
		} else {
			p.log.Warn("leasehold proxy: acquire failed, retrying", "name", r.Name, "err", err)
			wait = bo.Next()
		}
		t := p.clock.NewTimer(max(wait, 0))
		select {
		case <-t.C():
		case _, ok := <-notify:
			t.Stop()
			if !ok {
				notify = nil // the watch ended (store closing): poll
			} else {
				notifyAt = p.clock.Now()
			}
		case <-ctx.Done():
			t.Stop()
			return leasehold.Record{}, ctx.Err()
		case <-waitEnd.C():
			t.Stop()
			return p.timedOut(ctx, ns, r, sess, lastErr)
		case <-p.done:
			t.Stop()
			return leasehold.Record{}, leasehold.ErrClosed
		case <-sessDone:
			t.Stop()
			return leasehold.Record{}, ErrNoSession
		}
	}
}

// tryFailed decides what a failed attempt of a waiting acquire means: nil
// to keep waiting, or the error to return. When ctx ended with the
// attempt's outcome unknown, a grant it may have made is released.
func (p *Proxy) tryFailed(ctx context.Context, r leasehold.AcquireRequest, err error) error {
	switch {
	case errors.Is(err, leasehold.ErrHeld):
		return nil
	case ctx.Err() != nil:
		if !errors.Is(err, leasehold.ErrInvalid) && !errors.Is(err, leasehold.ErrClosed) {
			p.reclaim(r)
		}
		return ctx.Err()
	case errors.Is(err, leasehold.ErrInvalid), errors.Is(err, leasehold.ErrClosed):
		return err
	}
	return nil // transient: retry with the same request id
}

// reclaim releases a grant that an attempt cut short by its context may
// have made: if the live lease belongs to r.Owner, a retry with the same
// request id returns our grant (and nobody else's), which is released.
func (p *Proxy) reclaim(r leasehold.AcquireRequest) {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	rec, err := p.store.Get(ctx, r.Name)
	if err != nil || rec.Owner != r.Owner {
		return
	}
	rec, err = p.store.TryAcquire(ctx, r)
	if err != nil {
		return
	}
	p.held.Add(1)
	p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
}

// finishWait completes a waiting acquire's grant: released again if ctx
// ended meanwhile (the caller is gone), attached to its session otherwise.
func (p *Proxy) finishWait(ctx context.Context, sess *proxySession, rec leasehold.Record, r leasehold.AcquireRequest, t0 time.Time) (leasehold.Record, error) {
	if err := ctx.Err(); err != nil {
		p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		return leasehold.Record{}, err
	}
	return p.attach(sess, rec, r.TTL, t0)
}

// timedOut returns what a waiter whose Wait elapsed gets: the latest
// holder seen on the name, as a *HeldError with its remaining time brought
// up to date. With no holder seen yet it reads the store; if the lease is
// then free it makes one last attempt.
func (p *Proxy) timedOut(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, sess *proxySession, lastErr error) (leasehold.Record, error) {
	p.mu.Lock()
	held, at := ns.lastHeld, ns.lastHeldAt
	now := p.clock.Now()
	p.mu.Unlock()
	if held != nil {
		h := *held
		h.Remaining = max(h.Remaining-now.Sub(at), 0)
		return leasehold.Record{}, &h
	}
	rec, err := p.store.Get(ctx, r.Name)
	switch {
	case err == nil:
		return leasehold.Record{}, proxyHeld(rec)
	case errors.Is(err, leasehold.ErrNotFound):
		rec, t0, err := p.try(ctx, ns, r, nil, nil)
		if err != nil {
			return leasehold.Record{}, err
		}
		return p.finishWait(ctx, sess, rec, r, t0)
	case lastErr != nil:
		return leasehold.Record{}, lastErr
	}
	return leasehold.Record{}, err
}

// Waiters implements Backend.
func (p *Proxy) Waiters(name string) []Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.names[name]
	if ns == nil || len(ns.queue) == 0 {
		return nil
	}
	now := p.clock.Now()
	out := make([]Waiter, len(ns.queue))
	for i, w := range ns.queue {
		out[i] = Waiter{Owner: w.owner, Session: w.session, Since: w.since, Waited: max(now.Sub(w.since), 0)}
	}
	return out
}
