package server

// The proxy (proxy.go). Renew, release and force-release: passed through to the store, with their events.

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Renew implements Backend.
func (p *Proxy) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := firstError(storekit.ValidateHolder(name, owner, token), storekit.ValidateTTL(ttl)); err != nil {
		return err
	}
	ns := p.ref(name)
	defer p.unref(ns)
	if err := ns.lock(ctx); err != nil {
		return err
	}
	defer ns.unlock()
	p.mu.Lock()
	s := p.leaseSession[proxyLeaseKey{name, token}]
	ended := s != nil && (s.ended || !p.clock.Now().Before(s.expires))
	p.mu.Unlock()
	if ended {
		// Its session has expired or ended, and the proxy frees (or has
		// just freed) the lease on the store: as with the Engine, it is
		// not held any more, and a renewal must not say otherwise.
		return leasehold.ErrNotHeld
	}
	t0 := p.clock.Now()
	if err := p.store.Renew(ctx, name, owner, token, ttl); err != nil {
		return err
	}
	p.mu.Lock()
	if s != nil && (s.ended || !p.clock.Now().Before(s.expires)) {
		// The session expired or ended while the store renewed: the
		// session loop frees the lease, so the renewal cannot be
		// confirmed.
		p.mu.Unlock()
		return leasehold.ErrNotHeld
	}
	if s := p.leaseSession[proxyLeaseKey{name, token}]; s != nil {
		// A session lease: the proxy renews it with this TTL from now on,
		// and (as with the Engine) its holder's renewal keeps the session
		// alive.
		l := s.leases[proxyLeaseKey{name, token}]
		l.ttl, l.renewAt = ttl, t0.Add(ttl/3)
		s.expires = p.clock.Now().Add(s.ttl)
		p.armLocked(s)
	}
	p.emitUnlock(Event{Type: EventRenewed, Name: name, Owner: owner, Token: token})
	return nil
}

// Release implements Backend.
func (p *Proxy) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	return p.release(ctx, name, owner, token, EventReleased)
}

// release frees a grant on the store under the name's lock, detaches it
// from its session and reports it as typ.
func (p *Proxy) release(ctx context.Context, name, owner string, token uint64, typ EventType) error {
	ns := p.ref(name)
	defer p.unref(ns)
	if err := ns.lock(ctx); err != nil {
		return err
	}
	defer ns.unlock()
	return p.releaseLocked(ctx, ns, name, owner, token, typ)
}

// releaseLocked is release with the name's lock held.
func (p *Proxy) releaseLocked(ctx context.Context, ns *proxyName, name, owner string, token uint64, typ EventType) error {
	if err := p.store.Release(ctx, name, owner, token); err != nil {
		return err
	}
	k := proxyLeaseKey{name, token}
	p.mu.Lock()
	if p.released.has(k) {
		// Released before: the store answers a repeat as done, and
		// nothing changed (the name's lock orders the two).
		p.mu.Unlock()
		return nil
	}
	p.released.add(k)
	p.detachLocked(k)
	now := p.clock.Now()
	ns.releasedAt = now
	if typ == eventIfReported {
		if !p.granted.has(k) {
			p.mu.Unlock() // never reported nor counted: nor is its end
			return nil
		}
		typ = EventReleased
	}
	p.held.Add(-1)
	p.emitUnlock(Event{Type: typ, Name: name, Owner: owner, Token: token, Time: now})
	return nil
}

// eventIfReported, as the event type of a release, reports the release
// as released only if the proxy reported the grant (proxy_reported.go): a
// give-up's or a reclaim's own try can make, or return, a grant nobody was
// told of.
const eventIfReported EventType = ""

// releaseGrant releases a grant the proxy itself is giving up, whatever the
// caller's context, and logs a failure.
func (p *Proxy) releaseGrant(name, owner string, token uint64, typ EventType) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.release(ctx, name, owner, token, typ)
	if err != nil && !errors.Is(err, leasehold.ErrNotHeld) {
		p.log.Warn("leasehold proxy: release failed; the lease expires by its TTL",
			"name", name, "owner", owner, "token", token, "err", err)
	}
}

// ForceRelease implements Backend.
func (p *Proxy) ForceRelease(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	for attempt := 0; ; attempt++ {
		rec, err := p.store.Get(ctx, name)
		if err != nil {
			return leasehold.Record{}, err
		}
		err = p.release(ctx, name, rec.Owner, rec.Token, EventForced)
		if err == nil {
			return rec, nil
		}
		// ErrNotHeld: the grant ended (and maybe another began) between
		// the read and the release; look again.
		if !errors.Is(err, leasehold.ErrNotHeld) || attempt == 4 {
			return leasehold.Record{}, err
		}
	}
}
