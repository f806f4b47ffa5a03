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

	// A waiter in the store's own queue (waitQueued), under p.mu: joined
	// once it is in ns.queue, over once its wait has ended (it joins no
	// more).
	joined, over bool
}

// Acquire implements Backend. Without Wait it is one TryAcquire on the
// store (it does not queue; a store that queues waiters itself refuses it
// while others wait, any other may let it overtake queued waiters when the
// lease is free). With Wait it waits in the store's queue where the store
// has one (leasehold.Queuer), else behind this proxy's earlier waiters on
// the name.
func (p *Proxy) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	r := req.AcquireRequest
	if err := firstError(storekit.ValidateName(r.Name), storekit.ValidateOwner(r.Owner),
		storekit.ValidateRequestID(r.RequestID), storekit.ValidateData(r.Data)); err != nil {
		return leasehold.Record{}, err
	}
	if req.Wait < 0 {
		return leasehold.Record{}, invalidf("wait", req.Wait.String()+" is negative")
	}
	if err := validateGiveUp(req); err != nil {
		return leasehold.Record{}, err
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
	if req.Wait > 0 && (p.parkable(AcquireRequest{AcquireRequest: r, Wait: req.Wait}) || p.hasPark(r, req.Session)) {
		// A short poll of a request whose place is kept (the last poll of
		// a wait about to end: the Go client asks for the time left, down
		// to 1 ms) waits on that place too: waiting beside it, it queued
		// a second entry with the same request id in the store, and the
		// red team of issue 27 saw the lease granted to a "run -w 2" that
		// had gone, through RESP to a Redis proxy.
		return p.waitParked(ctx, r, req, sess)
	}
	if req.Wait == 0 {
		p.unpark(r)
	}
	ns := p.ref(r.Name)
	defer p.unref(ns)
	if req.GiveUp {
		return p.giveUp(ctx, ns, r)
	}
	if req.Wait == 0 {
		if err := p.queuedAhead(ctx, ns, r); err != nil {
			return leasehold.Record{}, err
		}
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
	if !p.newGrantLocked(proxyLeaseKey{rec.Name, rec.Token}) {
		p.mu.Unlock() // the request's grant, answered again
		return rec, t0, nil
	}
	p.emitUnlock(ev)
	return rec, t0, nil
}

// queuedAhead refuses a try-once acquire while this proxy queues waiters
// for the name itself (the store does not queue them): the lease, even if
// free this instant, is its head waiter's turn. The refusal names the
// holder the store reports (one Get, only while waiters are queued), else
// the head waiter (token 0) with a short retry hint. A store that queues
// (p.queuer) refuses by itself.
func (p *Proxy) queuedAhead(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest) error {
	if p.queuer != nil {
		return nil
	}
	p.mu.Lock()
	queued := len(ns.queue) > 0
	p.mu.Unlock()
	if !queued {
		return nil
	}
	rec, err := p.store.Get(ctx, ns.name)
	switch {
	case err == nil && rec.Owner == r.Owner && r.RequestID != "":
		return nil // perhaps a retry of the holder's own acquire: the store decides
	case err == nil:
		return proxyHeld(rec)
	case !errors.Is(err, leasehold.ErrNotFound):
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ns.queue) == 0 {
		return nil // the queue emptied meanwhile: try
	}
	return &leasehold.HeldError{Name: ns.name, Owner: ns.queue[0].owner, Remaining: queuedRetryHint}
}

// queuedRetryHint is the Remaining of a refusal that names a queued head
// waiter rather than a holder: when to look again.
const queuedRetryHint = 10 * time.Millisecond

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

// tryFirst tries at once when nobody of this proxy is queued on the name:
// a free lease is granted without queueing, and a refusal names the holder
// (what a waiter whose Wait runs out is told). done: the wait is over
// (granted, or an error that ends it, in rec and err); otherwise refused is
// the refusal to remember (nil if nothing was tried).
func (p *Proxy) tryFirst(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, sess *proxySession) (rec leasehold.Record, done bool, refused, err error) {
	p.mu.Lock()
	empty := len(ns.queue) == 0
	p.mu.Unlock()
	if !empty {
		return leasehold.Record{}, false, nil, nil
	}
	rec, t0, err := p.try(ctx, ns, r, nil, nil)
	if err == nil {
		rec, err = p.finishWait(ctx, sess, rec, r, t0)
		return rec, true, nil, err
	}
	if e := p.tryFailed(ctx, r, err); e != nil {
		return leasehold.Record{}, true, nil, e
	}
	return leasehold.Record{}, false, err, nil
}

// wait is Acquire with Wait > 0.
func (p *Proxy) wait(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	if p.queuer != nil {
		return p.waitQueued(ctx, ns, r, req, sess)
	}
	waitEnd := p.clock.NewTimer(req.Wait)
	defer waitEnd.Stop()
	var sessDone <-chan struct{}
	if sess != nil {
		sessDone = sess.done
	}

	rec, done, lastErr, err := p.tryFirst(ctx, ns, r, sess)
	if done {
		return rec, err
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
		return p.timedOut(ctx, ns, r, sess, lastErr, false)
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
			return p.timedOut(ctx, ns, r, sess, lastErr, false)
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
	p.releaseGrant(rec.Name, rec.Owner, rec.Token, eventIfReported)
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
// up to date. With no holder seen yet, or with readFirst (a waiter in the
// store's queue, which saw no holder since it joined), it reads the store;
// if the lease is then free it makes one last attempt (which a queuing
// store refuses, naming its head waiter, while others wait).
func (p *Proxy) timedOut(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, sess *proxySession, lastErr error, readFirst bool) (leasehold.Record, error) {
	seen := func() error {
		p.mu.Lock()
		held, at := ns.lastHeld, ns.lastHeldAt
		now := p.clock.Now()
		p.mu.Unlock()
		if held == nil {
			return nil
		}
		h := *held
		h.Remaining = max(h.Remaining-now.Sub(at), 0)
		return &h
	}
	if !readFirst {
		if err := seen(); err != nil {
			return leasehold.Record{}, err
		}
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
	}
	if held := seen(); held != nil {
		return leasehold.Record{}, held
	}
	if lastErr != nil {
		return leasehold.Record{}, lastErr
	}
	return leasehold.Record{}, err
}

// Waiters implements Backend.
func (p *Proxy) Waiters(name string) []Waiter {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ws []*proxyWaiter
	if ns := p.names[name]; ns != nil {
		ws = append(ws, ns.queue...)
	}
	for _, w := range p.permitWaitersLocked(name) { // a semaphore's, after the permit's own
		ws = append(ws, &w.w)
	}
	if len(ws) == 0 {
		return nil
	}
	now := p.clock.Now()
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		out[i] = Waiter{Owner: w.owner, Session: w.session, Since: w.since, Waited: max(now.Sub(w.since), 0)}
	}
	return out
}

// errWaitOver ends a store wait whose request's Wait ran out.
var errWaitOver = errors.New("leasehold proxy: the wait ran out")

// queueNotifier is a leasehold.Queuer that also tells when a waiter has
// joined its queue (queued, called at most once per call from any
// goroutine, not at all for a grant made at once; it must not block). The
// proxy then lists the waiter (Waiters, Stats, the queued event) from
// that moment, so that its list is in the store's order. Without it the
// proxy lists a waiter as it starts its store wait.
type queueNotifier interface {
	acquireWaitQueued(ctx context.Context, req leasehold.AcquireRequest, queued func()) (leasehold.Record, error)
}

// acquireWaitQueued implements queueNotifier for a Backend in this process
// (StoreOf): the backend's queued event for the request's owner says that
// the request waits in its queue. (Two waiters of one owner on one name
// may each take the other's event: only the proxy's list of its own
// waiters can be out of order then, not the grants.)
func (s backendStore) acquireWaitQueued(ctx context.Context, req leasehold.AcquireRequest, queued func()) (leasehold.Record, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := s.b.Subscribe(sctx, req.Name)
	go func() {
		for ev := range events {
			// An overflow may have lost the event: the waiter is most
			// likely queued by now.
			if ev.Type == EventOverflow || ev.Type == EventQueued && ev.Name == req.Name && ev.Owner == req.Owner {
				queued()
			}
		}
	}()
	return s.AcquireWait(ctx, req)
}

// waitQueued is Acquire with Wait > 0 on a store that queues waiters
// itself (leasehold.Queuer): the request waits in the store's queue,
// which every proxy in front of the store shares, so waiters are granted
// in the order the store received them, whichever proxy they came
// through. The proxy lists the waiter among its own (Waiters, Stats,
// events) while it waits, and ends the store wait when the request's
// Wait runs out, its context or session ends, or the proxy closes; the
// store then drops it from its queue (and releases a grant that raced
// with the end).
func (p *Proxy) waitQueued(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	// A queuing store refuses the first try while others wait, so it
	// overtakes nobody.
	rec, done, lastErr, err := p.tryFirst(ctx, ns, r, sess)
	if done {
		return rec, err
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return leasehold.Record{}, leasehold.ErrClosed
	}
	p.wg.Add(1) // Close waits for the store wait to end before closing the store
	p.mu.Unlock()
	defer p.wg.Done()

	// The store wait's context ends with ctx, the request's Wait, its
	// session or the proxy, and says which (its cause).
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	waitEnd := p.clock.NewTimer(req.Wait)
	defer waitEnd.Stop()
	var sessDone <-chan struct{}
	if sess != nil {
		sessDone = sess.done
	}
	go func() {
		select {
		case <-waitEnd.C():
			cancel(errWaitOver)
		case <-p.done:
			cancel(leasehold.ErrClosed)
		case <-sessDone:
			cancel(ErrNoSession)
		case <-wctx.Done():
		}
	}()

	w := &proxyWaiter{owner: r.Owner, session: req.Session, turn: make(chan struct{})}
	join := func() {
		p.mu.Lock()
		if w.joined || w.over {
			p.mu.Unlock()
			return
		}
		w.joined, w.since = true, p.clock.Now()
		ns.queue = append(ns.queue, w)
		p.waiting++
		p.emitUnlock(Event{Type: EventQueued, Name: ns.name, Owner: w.owner, Time: w.since})
	}
	granted := false
	defer func() {
		if !granted {
			p.leaveQueued(ns, w)
		}
	}()

	notifier, _ := p.store.(queueNotifier)
	bo := backoff.New(p.cfg.BackoffMin, p.cfg.BackoffMax)
	var t0 time.Time
	// waitFailed: the latest store wait failed on its own (a lost
	// connection) and may have left this request's entry in the store's
	// queue; if the wait then ends, the store is asked to remove it
	// (AcquireWait with the ended context, leasehold.Queuer).
	waitFailed := false
	for {
		t0 = p.clock.Now()
		waitFailed = false
		if notifier != nil {
			rec, err = notifier.acquireWaitQueued(wctx, r, join)
		} else {
			join()
			rec, err = p.queuer.AcquireWait(wctx, r)
		}
		if err == nil || wctx.Err() != nil {
			break
		}
		if errors.Is(err, leasehold.ErrInvalid) || errors.Is(err, leasehold.ErrClosed) {
			return leasehold.Record{}, err
		}
		waitFailed = true
		// Transient: wait again with the same request id (a grant made
		// meanwhile is recognised and given back).
		lastErr = err
		p.log.Warn("leasehold proxy: queued acquire failed, retrying", "name", r.Name, "err", err)
		t := p.clock.NewTimer(bo.Next())
		select {
		case <-t.C():
		case <-wctx.Done():
		}
		t.Stop()
		if wctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if waitFailed {
			_, _ = p.queuer.AcquireWait(wctx, r)
		}
		switch cause := context.Cause(wctx); {
		case ctx.Err() != nil:
			return leasehold.Record{}, ctx.Err()
		case errors.Is(cause, errWaitOver):
			p.leaveQueued(ns, w)
			return p.timedOut(ctx, ns, r, sess, lastErr, true)
		case cause != nil:
			return leasehold.Record{}, cause // ErrClosed, ErrNoSession
		}
		return leasehold.Record{}, err
	}

	// Granted (perhaps as the wait ended: a grant that arrives with the
	// Wait's end is kept, as the Engine keeps it).
	granted = true
	p.grantedQueued(ns, w, rec)
	if errors.Is(context.Cause(wctx), leasehold.ErrClosed) && ctx.Err() == nil {
		p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		return leasehold.Record{}, leasehold.ErrClosed
	}
	// A session that ended meanwhile is refused by attach, which releases
	// the grant; a caller gone meanwhile, by finishWait.
	return p.finishWait(ctx, sess, rec, r, t0)
}

// grantedQueued reports the grant that ended w's store wait: w leaves the
// proxy's list, and the grant's event follows every change this proxy
// made to the name before it. Its Handoff runs from the release through
// this proxy that freed the lease, if it saw one after w joined, else from
// the grant's time on the store (its Acquired, when that falls within the
// wait on this proxy's clock), else from when w joined.
func (p *Proxy) grantedQueued(ns *proxyName, w *proxyWaiter, rec leasehold.Record) {
	_ = ns.lock(context.Background())
	defer ns.unlock()
	p.mu.Lock()
	now := p.clock.Now()
	w.over = true
	ev := Event{Type: EventGranted, Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Time: now}
	if p.removeWaiterLocked(ns, w) {
		from := w.since
		switch {
		case ns.releasedAt.After(from):
			from = ns.releasedAt
		case rec.Acquired.After(from) && !rec.Acquired.After(now):
			from = rec.Acquired
		}
		ev.Handoff = max(now.Sub(from), 0)
	}
	ns.lastHeld, ns.lastHeldAt = proxyHeld(rec), now
	if !p.newGrantLocked(proxyLeaseKey{rec.Name, rec.Token}) {
		p.mu.Unlock() // the request's grant, answered again
		return
	}
	p.emitUnlock(ev)
}

// leaveQueued drops w, whose store wait ended without a grant, from the
// proxy's list (with a dequeued event if it was listed); it joins no more.
func (p *Proxy) leaveQueued(ns *proxyName, w *proxyWaiter) {
	p.mu.Lock()
	w.over = true
	if !p.removeWaiterLocked(ns, w) {
		p.mu.Unlock()
		return
	}
	p.emitUnlock(Event{Type: EventDequeued, Name: ns.name, Owner: w.owner})
}
