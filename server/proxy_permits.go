package server

// The proxy (proxy.go). Semaphores: a semaphore's acquire waits in the
// proxy with permitLoop (semaphore_http.go: a pass over the free permits
// whenever one may have become free), not in a queue of the store, so
// its waiters are not served in arrival order. They are counted all the
// same: in Stats.Waiters, and listed by Waiters of each permit they may
// take, with queued and dequeued events named by the semaphore.

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold"
)

var _ PermitBackend = (*Proxy)(nil)

// proxyPermitWaiter is a semaphore's acquire waiting in the proxy.
type proxyPermitWaiter struct {
	w proxyWaiter
	n int
}

// AcquirePermit implements PermitBackend.
func (p *Proxy) AcquirePermit(ctx context.Context, sem string, n int, req AcquireRequest) (leasehold.Record, error) {
	if err := validatePermits(sem, n); err != nil {
		return leasehold.Record{}, err
	}
	req.Name = httpPermitName(sem, 0)
	if err := validateAcquire(req); err != nil {
		return leasehold.Record{}, err
	}
	wait := req.Wait
	req.Wait = 0
	rec, soonest, err := semTry(ctx, p, sem, n, req)
	if err == nil || soonest == nil {
		return rec, err
	}
	if wait <= 0 {
		return leasehold.Record{}, noPermit(sem, n, soonest)
	}
	w := &proxyPermitWaiter{w: proxyWaiter{owner: req.Owner, session: req.Session, since: p.clock.Now()}, n: n}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return leasehold.Record{}, leasehold.ErrClosed
	}
	p.permitWaits[sem] = append(p.permitWaits[sem], w)
	p.waiting++
	p.emitUnlock(Event{Type: EventQueued, Name: sem, Owner: req.Owner, Time: w.w.since, Waiters: len(p.permitWaits[sem])})
	req.Wait = wait
	rec, err = permitLoop(ctx, p, sem, n, req)
	p.mu.Lock()
	q := p.permitWaits[sem]
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(p.permitWaits, sem)
	} else {
		p.permitWaits[sem] = q
	}
	p.waiting--
	if err == nil || errors.Is(err, leasehold.ErrClosed) {
		p.mu.Unlock()
		return rec, err
	}
	p.emitUnlock(Event{Type: EventDequeued, Name: sem, Owner: req.Owner, Waiters: len(q)})
	return rec, err
}

// permitWaitersLocked are the semaphore waiters that may take the permit
// name, in arrival order. p.mu held.
func (p *Proxy) permitWaitersLocked(name string) []*proxyPermitWaiter {
	if len(p.permitWaits) == 0 {
		return nil
	}
	sem, i, ok := permitOf(name)
	if !ok {
		return nil
	}
	var out []*proxyPermitWaiter
	for _, w := range p.permitWaits[sem] {
		if w.n > i {
			out = append(out, w)
		}
	}
	return out
}
