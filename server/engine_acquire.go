package server

// The engine (engine.go). Acquire: granting a free lease, queueing waiters and handing the lease to them in arrival order.

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/mutation"
)

// Acquire implements Backend.
func (e *Engine) Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error) {
	ch := grantChans.Get().(chan grantResult)
	ent, w := e.acquire(ctx, req, sendTo(ch))
	if w != nil {
		grantChans.Put(ch) // nothing was, or will be, sent on it
		return e.wait(ctx, ent, w)
	}
	r := <-ch
	grantChans.Put(ch)
	return r.rec, r.err
}

// AcquireAsync is Acquire for a caller that must not block (the RESP
// server's reader, which goes on reading the connection): done gets the
// answer once, on this goroutine after the engine is unlocked when
// nothing need be made durable first, else on the log's goroutine once it
// is (keep done short: it holds up the commits after it). A request that
// waits in the queue waits on a goroutine of its own.
func (e *Engine) AcquireAsync(ctx context.Context, req AcquireRequest, done func(leasehold.Record, error)) {
	if ent, w := e.acquire(ctx, req, func(r grantResult) { done(r.rec, r.err) }); w != nil {
		go func() { done(e.wait(ctx, ent, w)) }()
	}
}

// acquire is the engine's part of an acquire: it answers through deliver,
// once (at once, or when what it reports is durable), or it answers
// nothing and returns the waiter it queued or found parked, and its
// entry, for the caller to wait on (wait).
func (e *Engine) acquire(ctx context.Context, req AcquireRequest, deliver func(grantResult)) (*engEntry, *engWaiter) {
	if req.GiveUp {
		// Carried through once received, as in proxy mode: its caller
		// has gone by definition, and a client that closed its
		// connection at once had the give-up dropped, the grant kept for
		// its TTL (the red team's re-check of 5aa2e76: 2 of 40).
		ctx = context.WithoutCancel(ctx)
	}
	if err := e.lockOpen(validateAcquire(req), ctx.Err()); err != nil {
		deliver(grantResult{err: err})
		return nil, nil
	}
	now := e.now()
	sess, err := e.liveSessionLocked(req.Session, now)
	if err != nil {
		e.unlock()
		deliver(grantResult{err: err})
		return nil, nil
	}
	ent := e.leases[req.Name]
	if ent != nil {
		e.expireIfDue(ent, now)
	}
	if w := e.unpark(ent, req); w != nil {
		// The next poll of a parked waiter: it waits on in its place.
		e.unlock()
		return ent, w
	}
	switch {
	case req.GiveUp:
		e.giveUp(ctx, ent, req, now, deliver)
		return nil, nil
	case ent.live(now) && req.RequestID != "" && ent.reqID() == req.RequestID && ent.owner == req.Owner:
		// A retried acquire: the same grant, with a fresh expiry.
		e.refresh(ent, req, sess, now, deliver)
	case ent.live(now) && !mutation.On("grant-no-recheck") || ent != nil && len(ent.queue()) > 0:
		if req.Wait <= 0 {
			e.refuseThen(ent, ent.heldError(now), func(err error) { deliver(grantResult{err: err}) })
			return nil, nil
		}
		w := &engWaiter{req: req, sess: sess, since: e.clk.Now(), at: now, ch: make(chan grantResult, 1)}
		ent.setQueue(append(ent.queue(), w))
		e.waiters++
		if sess != nil {
			sess.waits[w] = struct{}{}
		}
		n := len(ent.queue())
		e.commit(nil, nil, func(error) {
			e.emit(Event{Type: EventQueued, Name: req.Name, Owner: req.Owner, Time: w.since, Waiters: n})
		})
		e.unlock()
		return ent, w
	default:
		if ent == nil {
			ent = newEntry(req.Name)
			e.leases[req.Name] = ent
		}
		e.grant(ent, req, sess, now, 0, deliver)
	}
	e.unlock()
	return nil, nil
}

// giveUp answers a give-up (AcquireRequest.GiveUp), the place kept for its
// request given up already (unpark): the grant the request holds is
// released, unchanged (not renewed: a give-up's TTL or data extended it,
// and a lost answer left it for that TTL; the red team of 55bc5e7), and
// answered; else a refusal naming the holder, or ErrNotFound for a free
// lease. It never grants. Called with e.mu held; it unlocks.
func (e *Engine) giveUp(ctx context.Context, ent *engEntry, req AcquireRequest, now int64, deliver func(grantResult)) {
	if ent.live(now) && ent.reqID() == req.RequestID && ent.owner == req.Owner {
		rec := ent.record(now)
		e.unlock()
		e.ReleaseAsync(ctx, rec.Name, rec.Owner, rec.Token, func(err error) {
			if err != nil {
				rec = leasehold.Record{}
			}
			deliver(grantResult{rec: rec, err: err})
		})
		return
	}
	err := error(leasehold.ErrNotFound)
	if ent.live(now) || ent != nil && len(ent.queue()) > 0 {
		err = ent.heldError(now)
	}
	e.refuseThen(ent, err, func(err error) { deliver(grantResult{err: err}) })
}

// refuse returns err, a refusal that reports ent's state (held by someone
// else, not held), once that state is durable (see settle). Called with
// e.mu held; it unlocks.
func (e *Engine) refuse(ent *engEntry, err error) error {
	if cerr := e.settle(ent); cerr != nil {
		return cerr
	}
	return err
}

// refuseThen is refuse answering through done. Called with e.mu held; it
// unlocks.
func (e *Engine) refuseThen(ent *engEntry, err error, done func(error)) {
	e.settleThen(ent, func(cerr error) {
		if cerr != nil {
			err = cerr
		}
		done(err)
	})
}

// settle returns once every record appended for ent so far is durable (at
// once when none is pending, or ent is nil), with the log's error if that
// failed. Every answer that reports a name's state (a refusal, a read)
// waits for it: it must not report a grant, a release or an expiry that a
// crash can still undo, after which the recovered state would contradict
// it. Called with e.mu held; it unlocks.
func (e *Engine) settle(ent *engEntry) error {
	ch := errChans.Get().(chan error)
	e.settleThen(ent, func(cerr error) { ch <- cerr })
	return awaitErr(ch)
}

// settleThen is settle calling done (after unlocking) instead of
// returning.
func (e *Engine) settleThen(ent *engEntry, done func(error)) {
	if ent == nil || ent.pending.Load() == 0 {
		// Nothing pending: everything appended for ent is durable (pending
		// drops only once the log reports a record durable).
		e.unlock()
		done(nil)
		return
	}
	e.commit(ent, nil, done)
	e.unlock()
}

// wait blocks a queued waiter until it is granted, its wait ends, or ctx
// ends.
func (e *Engine) wait(ctx context.Context, ent *engEntry, w *engWaiter) (leasehold.Record, error) {
	t := e.clk.NewTimer(w.req.Wait)
	defer t.Stop()
	select {
	case r := <-w.ch:
		return r.rec, r.err
	case <-ctx.Done():
	case <-t.C():
	}
	e.lock()
	if !w.done && ctx.Err() == nil && !e.closed {
		// The wait ran out. The holder's expiry may be due at this very
		// moment while the expiry loop has not applied it yet (its timer
		// fires at the same instant, or it runs late on a loaded machine):
		// apply it first, which grants the lease to the head waiter,
		// perhaps this one.
		e.expireIfDue(ent, e.now())
	}
	if !w.done {
		now := e.now()
		if ctx.Err() == nil && e.canPark(w) {
			// The poll ran out: the place waits for the next one.
			e.park(w)
		} else {
			e.dequeue(ent, w)
		}
		if err := ctx.Err(); err != nil {
			e.unlock()
			return leasehold.Record{}, err
		}
		if ent.live(now) {
			return leasehold.Record{}, e.refuse(ent, ent.heldError(now))
		}
		return leasehold.Record{}, e.refuse(ent, &leasehold.HeldError{Name: ent.name, Owner: ent.owner, Token: ent.token, Acquired: time.Unix(0, ent.acquired)})
	}
	e.unlock()
	// Granted as the wait ended: the grant is coming.
	r := <-w.ch
	if r.err != nil || ctx.Err() == nil {
		return r.rec, r.err
	}
	// The caller is gone: free the grant it will never learn of.
	_ = e.Release(context.Background(), r.rec.Name, r.rec.Owner, r.rec.Token)
	return leasehold.Record{}, ctx.Err()
}

// dequeue removes a waiter that leaves without a grant. e.mu held.
func (e *Engine) dequeue(ent *engEntry, w *engWaiter) {
	w.done = true
	q := ent.queue()
	for i, x := range q {
		if x == w {
			ent.setQueue(append(q[:i], q[i+1:]...))
			break
		}
	}
	e.waiters--
	if w.sess != nil {
		delete(w.sess.waits, w)
	}
	n := len(ent.queue())
	e.commit(nil, nil, func(error) {
		e.emit(Event{Type: EventDequeued, Name: ent.name, Owner: w.req.Owner, Time: e.clk.Now(), Waiters: n})
	})
	e.forgetIfIdle(ent)
}

// grant makes a new grant of ent to req and reports it to deliver once
// durable.
// freedAt is when the release or expiry that made room happened (0 for a
// direct grant). e.mu held.
func (e *Engine) grant(ent *engEntry, req AcquireRequest, sess *engSession, now, freedAt int64, deliver func(grantResult)) {
	e.token++
	if ent.held {
		e.held-- // an expired grant being replaced
	}
	e.unTomb(ent)
	ent.owner = e.owners.intern(req.Owner)
	ent.setGrantFields(req.RequestID, string(req.Data))
	ent.token, ent.ttl, ent.loggedTTL = e.token, req.TTL, req.TTL
	ent.acquired = e.clk.Now().UnixNano()
	ent.held = true
	e.held++
	e.attach(ent, sess)
	if sess == nil {
		e.dl.set(ent, now+int64(req.TTL))
	} else {
		e.dl.remove(ent)
	}
	e.pokeIfEarlier()
	rec := ent.record(now)
	waiters := e.queuedOn(ent)
	e.enc = appendGrant(e.scratch(), ent)
	e.commit(ent, e.enc, func(err error) {
		if err != nil {
			deliver(grantResult{err: fmt.Errorf("persist grant: %w", err)})
			return
		}
		ev := Event{Type: EventGranted, Name: rec.Name, Owner: rec.Owner, Token: rec.Token, Time: rec.Acquired, Waiters: waiters}
		if freedAt != 0 {
			ev.Handoff = time.Duration(e.now() - freedAt)
		}
		e.emit(ev)
		deliver(grantResult{rec: rec})
	})
}

// refresh answers a retried acquire with the grant it already has.
func (e *Engine) refresh(ent *engEntry, req AcquireRequest, sess *engSession, now int64, deliver func(grantResult)) {
	ent.setGrantFields(ent.reqID(), string(req.Data))
	ent.ttl = req.TTL
	var rec []byte
	if sess == nil && ent.sess() == nil {
		e.dl.set(ent, now+int64(req.TTL))
		e.pokeIfEarlier()
		if req.TTL > ent.loggedTTL {
			ent.loggedTTL = req.TTL
			rec = encodeTTL(ent)
		}
	}
	r := ent.record(now)
	e.commit(ent, rec, func(err error) { deliver(grantResult{rec: r, err: err}) })
}

func (e *Engine) attach(ent *engEntry, sess *engSession) {
	if old := ent.sess(); old != nil && old != sess {
		delete(old.leases, ent)
	}
	ent.setSess(sess)
	if sess != nil {
		sess.leases[ent] = struct{}{}
	}
}

func validateAcquire(req AcquireRequest) error {
	if err := req.AcquireRequest.Validate(); err != nil {
		return err
	}
	if req.Wait < 0 {
		return &leasehold.InvalidError{Field: "wait", Reason: "must not be negative"}
	}
	return validateGiveUp(req)
}

// validateGiveUp checks a give-up's request: a request id to give up, and
// no wait.
func validateGiveUp(req AcquireRequest) error {
	switch {
	case !req.GiveUp:
		return nil
	case req.RequestID == "":
		return &leasehold.InvalidError{Field: "give_up", Reason: "needs the request id of the wait to give up"}
	case req.Wait != 0:
		return &leasehold.InvalidError{Field: "give_up", Reason: "takes no wait"}
	case req.Session != "":
		return &leasehold.InvalidError{Field: "give_up", Reason: "takes no session (the grant it finds is released)"}
	}
	return nil
}

// liveSessionLocked returns the live session id names (nil for ""), or
// ErrNoSession when it is unknown or has ended. e.mu held.
func (e *Engine) liveSessionLocked(id string, now int64) (*engSession, error) {
	if id == "" {
		return nil, nil
	}
	sess := e.sessions[id]
	if sess == nil || !sess.liveAt(now) {
		return nil, ErrNoSession
	}
	return sess, nil
}
