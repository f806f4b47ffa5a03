package server

import (
	"context"
	"time"

	"github.com/leasehold/leasehold"
)

// giveUp answers a give-up (AcquireRequest.GiveUp), the place kept for
// r's request given up already: the grant r's request id holds is
// released, and answered; never a new one. The store has no call for
// that: under the name's lock it looks, and tries with the request id only
// while r's owner holds the lease (the store answers the request's own
// grant, and refuses another's). The try asks for the grant's own TTL and
// data, so that it renews nothing, and once sent, the give-up is carried
// through whatever its caller does: it asked with the give-up's TTL and
// data and was cut off with the client, and a client gone between the try
// and the release left the grant renewed for the give-up's TTL (a day, in
// the red team's re-check of 264b599). A try that took the lease anew (the
// grant seen ended meanwhile) is released too, and answered as a free
// lease.
func (p *Proxy) giveUp(ctx context.Context, ns *proxyName, r leasehold.AcquireRequest) (leasehold.Record, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	// All under the name's lock: give-ups of one request at once released
	// its grant once each (the store's release is idempotent), a released
	// event each (the red team's re-check of 5aa2e76, on SQLite).
	if err := ns.lock(ctx); err != nil {
		return leasehold.Record{}, err
	}
	defer ns.unlock()
	seen, err := p.store.Get(ctx, r.Name)
	switch {
	case err != nil:
		return leasehold.Record{}, err // ErrNotFound: free
	case seen.Owner != r.Owner:
		return leasehold.Record{}, proxyHeld(seen)
	}
	if seen.TTL > 0 {
		r.TTL, r.Data = seen.TTL, seen.Data
	}
	rec, err := p.store.TryAcquire(ctx, r)
	if err != nil {
		return leasehold.Record{}, err
	}
	// A grant this try made (fresh), or one whose grant was never
	// reported (its attempt's answer was lost), is released without an
	// event: the red team's round 6 saw a released event for a token with
	// no granted event when two give-ups raced a poll (SQLite, 5 of 30).
	if err := p.releaseLocked(ctx, ns, rec.Name, rec.Owner, rec.Token, eventIfReported); err != nil {
		return leasehold.Record{}, err
	}
	if rec.Token != seen.Token { // fresh: the request's grant had ended
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	return rec, nil
}

// giveUpTimeout bounds a give-up the proxy carries through.
const giveUpTimeout = 5 * time.Second
