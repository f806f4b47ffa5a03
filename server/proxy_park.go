package server

// The proxy (proxy.go). Parked waits: a waiter keeps its place between two
// of its polls, as on the engine (engine_park.go).
//
// A waiting acquire with a request id runs its wait in the background (a
// "park"), which outlives the poll: the poll waits on it for its own Wait,
// and when that runs out the park goes on waiting in the queue (the
// store's, or this proxy's) for ParkGrace. The same owner's next poll of
// the name with the same request id and session waits on the same park, so
// it keeps its place. A park that no poll waits on for ParkGrace ends: its
// wait leaves the queue, and a grant it got meanwhile is released. A poll
// whose caller goes away ends its park at once, as a waiter whose
// connection closes leaves the queue.

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// parkedWaitLen is the Wait of a park's own acquire: its end is the
// grace's (or its last poll's caller's), not a timer's.
const parkedWaitLen = 24 * time.Hour

type proxyPark struct {
	key     string
	session string
	cancel  context.CancelFunc
	done    chan struct{} // closed once rec and err are set
	rec     leasehold.Record
	err     error

	// Under p.mu.
	polls   int           // polls waiting on it now
	quiet   chan struct{} // closed when a poll comes back (ends a grace)
	grace   clock.Timer   // the running grace's timer, while quiet is set
	taken   bool          // its answer went to a poll
	givenUp bool          // a try with its request id gave it up (unpark)
}

// parkable reports whether a waiting acquire runs as a park.
func (p *Proxy) parkable(req AcquireRequest) bool {
	return req.RequestID != "" && req.Wait >= minParkWait
}

// hasPark reports whether r (its name, owner and request id) has a park
// of session now.
func (p *Proxy) hasPark(r leasehold.AcquireRequest, session string) bool {
	if r.RequestID == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pk := p.parks[parkKey(r.Name, r.Owner, r.RequestID)]
	return pk != nil && pk.session == session
}

// waitParked is Acquire with Wait for a parkable request: it waits on the
// name's park for this owner and request id (started if there is none)
// for req.Wait.
func (p *Proxy) waitParked(ctx context.Context, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	key := parkKey(r.Name, r.Owner, r.RequestID)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return leasehold.Record{}, leasehold.ErrClosed
	}
	pk := p.parks[key]
	if pk != nil && pk.session != req.Session {
		// Another session's request: this one waits anew.
		p.endParkLocked(pk)
		pk = nil
	}
	if pk == nil {
		if len(p.parks) >= maxParked {
			p.mu.Unlock()
			return p.waitNow(ctx, r, req, sess)
		}
		pk = p.startParkLocked(key, r, req, sess)
	}
	pk.polls++
	pk.endGraceLocked() // a grace was running: the place is taken back
	p.mu.Unlock()

	t := p.clock.NewTimer(req.Wait)
	defer t.Stop()
	select {
	case <-pk.done:
		p.mu.Lock()
		pk.polls--
		first := !pk.taken
		pk.taken = true
		givenUp := pk.givenUp
		p.dropParkLocked(pk)
		p.mu.Unlock()
		if givenUp {
			// A try with this request id gave the place up (the client's
			// give-up: its caller has gone, while this poll was still
			// pending on a pipelined connection). Waiting anew here could
			// get a grant that nobody would hold: the red team of issue 27
			// saw the lease handed to a "run -w 2" that had exited, through
			// RESP to a Redis proxy, in 2 runs of 5.
			return leasehold.Record{}, p.heldNow(ctx, r)
		}
		if errors.Is(pk.err, context.Canceled) && ctx.Err() == nil {
			// Ended by another poll of the same request whose caller went
			// away: this caller still waits.
			return p.waitNow(ctx, r, req, sess)
		}
		if !first {
			// Another poll of the same request took the answer: this one
			// gets what a retry gets.
			return p.waitNow(ctx, r, AcquireRequest{AcquireRequest: r, Session: req.Session}, sess)
		}
		if pk.err == nil && ctx.Err() != nil {
			p.releaseGrant(pk.rec.Name, pk.rec.Owner, pk.rec.Token, EventReleased)
			return leasehold.Record{}, ctx.Err()
		}
		return pk.rec, pk.err
	case <-ctx.Done():
		// The caller went away: the waiter leaves the queue.
		p.mu.Lock()
		pk.polls--
		p.endParkLocked(pk)
		p.mu.Unlock()
		return leasehold.Record{}, ctx.Err()
	case <-t.C():
	}
	p.mu.Lock()
	pk.polls--
	if pk.polls == 0 {
		p.graceLocked(pk)
	}
	p.mu.Unlock()
	return leasehold.Record{}, p.heldNow(ctx, r)
}

// unpark gives up the park of a try with its request id: the try then gets
// what the store answers that request id (the park's grant, if it got
// one: a retry's answer). It returns once the park's wait has ended.
func (p *Proxy) unpark(r leasehold.AcquireRequest) {
	if r.RequestID == "" {
		return
	}
	key := parkKey(r.Name, r.Owner, r.RequestID)
	p.mu.Lock()
	pk := p.parks[key]
	if pk == nil {
		p.mu.Unlock()
		return
	}
	p.dropParkLocked(pk)
	pk.taken, pk.givenUp = true, true
	pk.endGraceLocked()
	p.mu.Unlock()
	pk.cancel()
	<-pk.done
}

// waitNow is the wait of a request that does not park.
func (p *Proxy) waitNow(ctx context.Context, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) (leasehold.Record, error) {
	ns := p.ref(r.Name)
	defer p.unref(ns)
	return p.wait(ctx, ns, r, req, sess)
}

// startParkLocked starts the park of key's wait. p.mu held.
func (p *Proxy) startParkLocked(key string, r leasehold.AcquireRequest, req AcquireRequest, sess *proxySession) *proxyPark {
	ctx, cancel := context.WithCancel(p.ctx)
	pk := &proxyPark{key: key, session: req.Session, cancel: cancel, done: make(chan struct{})}
	p.parks[key] = pk
	long := req
	long.Wait = parkedWaitLen
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		rec, err := p.waitNow(ctx, r, long, sess)
		p.mu.Lock()
		pk.rec, pk.err = rec, err
		close(pk.done)
		// Ended by its grace or its caller: nobody takes the grant.
		untaken := pk.polls == 0 && p.parks[key] != pk && !pk.taken
		if untaken {
			pk.taken = true
		}
		p.mu.Unlock()
		if untaken && err == nil {
			p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		}
	}()
	return pk
}

// endGraceLocked ends pk's grace, if one runs (a poll came back, or the
// place was given up): its timer stops here, as the Engine's
// (engWaiter.endGrace). p.mu held.
func (pk *proxyPark) endGraceLocked() {
	if pk.quiet != nil {
		close(pk.quiet)
		pk.quiet = nil
		pk.grace.Stop()
	}
}

// graceLocked starts pk's grace: unless a poll comes back within
// ParkGrace, the park ends (a grant it got is released). p.mu held.
func (p *Proxy) graceLocked(pk *proxyPark) {
	quiet := make(chan struct{})
	pk.quiet = quiet
	t := p.clock.NewTimer(ParkGrace) // from now, as the Engine's park
	pk.grace = t
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
		case <-quiet:
			return
		case <-p.done:
			return
		}
		p.mu.Lock()
		if pk.quiet != quiet || pk.polls > 0 {
			p.mu.Unlock()
			return
		}
		pk.quiet = nil
		p.endParkLocked(pk)
		p.mu.Unlock()
	}()
}

// endParkLocked ends pk: no poll takes it back, its wait leaves the queue,
// and a grant it got (now or as it ends) is released. p.mu held.
func (p *Proxy) endParkLocked(pk *proxyPark) {
	p.dropParkLocked(pk)
	pk.cancel()
	select {
	case <-pk.done:
		if !pk.taken && pk.err == nil {
			pk.taken = true
			rec := pk.rec
			go p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		}
	default:
		// The wait ends with its context; its goroutine releases a grant
		// that raced with the end (nobody takes it: it is dropped).
	}
}

// dropParkLocked forgets pk as key's park. p.mu held.
func (p *Proxy) dropParkLocked(pk *proxyPark) {
	if p.parks[pk.key] == pk {
		delete(p.parks, pk.key)
	}
}

// heldNow is the refusal of a poll whose Wait ran out while its park waits
// on: the holder the proxy saw last, else the store's, else the queue.
func (p *Proxy) heldNow(ctx context.Context, r leasehold.AcquireRequest) error {
	p.mu.Lock()
	var held *leasehold.HeldError
	if ns := p.names[r.Name]; ns != nil && ns.lastHeld != nil {
		h := *ns.lastHeld
		h.Remaining = max(h.Remaining-p.clock.Now().Sub(ns.lastHeldAt), 0)
		held = &h
	}
	p.mu.Unlock()
	if held != nil {
		return held
	}
	rec, err := p.store.Get(ctx, r.Name)
	switch {
	case err == nil:
		return proxyHeld(rec)
	case errors.Is(err, leasehold.ErrNotFound):
		return &leasehold.HeldError{Name: r.Name, Remaining: queuedRetryHint}
	}
	return err
}
