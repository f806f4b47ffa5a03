package server

// The engine (engine.go). Renew, release, force-release and expiry: how a grant ends and the lease passes on.

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/mutation"
	"github.com/leasehold/leasehold/storekit"
)

// lockEntry is lockOpen, then returns name's entry (nil if none) with any
// expiry that is due applied.
func (e *Engine) lockEntry(name string, checks ...error) (*engEntry, int64, error) {
	if err := e.lockOpen(checks...); err != nil {
		return nil, 0, err
	}
	now := e.now()
	ent := e.leases[name]
	if ent != nil {
		e.expireIfDue(ent, now)
	}
	return ent, now, nil
}

// Renew implements Backend.
func (e *Engine) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	ent, now, err := e.lockEntry(name, storekit.ValidateHolder(name, owner, token), storekit.ValidateTTL(ttl), ctx.Err())
	if err != nil {
		return err
	}
	if !ent.live(now) || ent.owner != owner || ent.token != token {
		return e.refuse(ent, leasehold.ErrNotHeld)
	}
	ch := errChans.Get().(chan error)
	ent.ttl = ttl
	var rec []byte
	if s := ent.sess(); s != nil {
		e.sdl.set(s, now+int64(s.ttl)) // a session lease's renewal keeps its session alive
	} else {
		e.dl.set(ent, now+int64(ttl))
		if ttl > ent.loggedTTL {
			ent.loggedTTL = ttl
			rec = encodeTTL(ent)
		}
	}
	e.pokeIfEarlier()
	ev := Event{Type: EventRenewed, Name: name, Owner: owner, Token: token, Time: e.clk.Now(), Waiters: e.queuedOn(ent)}
	e.commit(ent, rec, func(err error) {
		if err == nil {
			e.emit(ev)
		}
		ch <- err
	})
	e.unlock()
	return awaitErr(ch)
}

// Release implements Backend.
func (e *Engine) Release(ctx context.Context, name, owner string, token uint64) error {
	ch := errChans.Get().(chan error)
	e.ReleaseAsync(ctx, name, owner, token, func(err error) { ch <- err })
	return awaitErr(ch)
}

// ReleaseAsync is Release answering through done, as AcquireAsync: it
// never blocks on the log.
func (e *Engine) ReleaseAsync(ctx context.Context, name, owner string, token uint64, done func(error)) {
	ent, now, err := e.lockEntry(name, storekit.ValidateHolder(name, owner, token), ctx.Err())
	if err != nil {
		done(err)
		return
	}
	if ent == nil || (ent.owner != owner || ent.token != token) && !mutation.On("release-no-owner") {
		e.refuseThen(ent, leasehold.ErrNotHeld, done)
		return
	}
	if !ent.held {
		// Already released (or expired): repeat the answer once the
		// release is durable.
		e.commit(ent, nil, done)
		e.unlock()
		return
	}
	e.free(ent, now, EventReleased, done)
	e.unlock()
}

// ForceRelease implements Backend.
func (e *Engine) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	ent, now, err := e.lockEntry(name, storekit.ValidateName(name))
	if err != nil {
		return leasehold.Record{}, err
	}
	ch := make(chan error, 1)
	if !ent.live(now) {
		return leasehold.Record{}, e.refuse(ent, leasehold.ErrNotFound)
	}
	rec := ent.record(now)
	e.free(ent, now, EventForced, func(err error) { ch <- err })
	e.unlock()
	return rec, <-ch
}

// free ends ent's grant (release, force, expiry), logs it, and hands the
// lease to the first live waiter. e.mu held.
func (e *Engine) free(ent *engEntry, now int64, why EventType, done func(error)) {
	ev := Event{Type: why, Name: ent.name, Owner: ent.owner, Token: ent.token, Time: e.clk.Now()}
	ent.held = false
	e.held--
	e.attach(ent, nil)
	e.dl.remove(ent)
	ev.Waiters = e.queuedOn(ent)
	e.enc = appendRelease(e.scratch(), ent)
	e.commit(ent, e.enc, func(err error) {
		if err == nil {
			e.emit(ev)
		}
		if done != nil {
			done(err)
		}
	})
	if len(ent.queue()) > 0 {
		q := ent.queue()
		w := q[0]
		ent.setQueue(q[1:])
		e.waiters--
		w.done = true
		if w.sess != nil {
			delete(w.sess.waits, w)
		}
		e.grant(ent, w.req, w.sess, now, now, w.give)
		w.token, w.got = ent.token, ent.name
		e.answerTwins(ent, w, now)
		return
	}
	if len(e.sems) > 0 && e.handPermit(ent, now) {
		return
	}
	e.tomb(ent, now)
}

// expireIfDue ends ent's grant if its TTL (or session) ran out. e.mu held.
func (e *Engine) expireIfDue(ent *engEntry, now int64) {
	if ent.held && !ent.live(now) {
		e.free(ent, now, EventExpired, nil)
	}
}

// forgetIfIdle drops an entry that is neither held, queued on, nor a
// recent tombstone.
func (e *Engine) forgetIfIdle(ent *engEntry) {
	if !ent.held && len(ent.queue()) == 0 && !ent.tomb && ent.pending.Load() == 0 {
		if e.leases[ent.name] == ent {
			delete(e.leases, ent.name)
		}
	}
}

// answerTwins answers the other waiters of ent that are the same request
// as w, just granted (same owner, request id and session: a client that
// sent its poll again while the first was still waiting), with w's grant,
// as a retried acquire is answered. Left queued, such a twin waited behind
// its own grant and was refused naming its own owner. e.mu held.
func (e *Engine) answerTwins(ent *engEntry, w *engWaiter, now int64) {
	if w.req.RequestID == "" {
		return
	}
	q := ent.queue()
	kept := q[:0]
	var twins []*engWaiter
	for _, x := range q {
		if x.req.RequestID == w.req.RequestID && x.req.Owner == w.req.Owner && x.sess == w.sess && !x.done {
			twins = append(twins, x)
			continue
		}
		kept = append(kept, x)
	}
	if len(twins) == 0 {
		return
	}
	clear(q[len(kept):])
	ent.setQueue(kept)
	for _, x := range twins {
		e.waiters--
		x.done = true
		if x.sess != nil {
			delete(x.sess.waits, x)
		}
		if x.parked {
			delete(e.parked, x.parkKey())
			x.parked = false
		}
		x.token, x.got = ent.token, ent.name
		e.refresh(ent, x.req, x.sess, now, x.give)
	}
}
