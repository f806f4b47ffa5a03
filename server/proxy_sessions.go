package server

// The proxy (proxy.go). Sessions: the proxy keeps them itself and renews their leases in the store.

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

type proxyLeaseKey struct {
	name  string
	token uint64
}

type proxySession struct {
	id      string
	ttl     time.Duration
	expires time.Time // by the proxy's clock
	leases  map[proxyLeaseKey]*proxySessionLease
	// timer wakes the renewal loop at timerAt: the earliest renewal or the
	// expiry. It is re-armed under mu by whoever makes that earlier (attach,
	// or the loop itself); kick tells a sleeping loop to wait on the new one.
	timer   clock.Timer
	timerAt time.Time
	kick    chan struct{}
	done    chan struct{} // closed when the session ends
	ended   bool
}

type proxySessionLease struct {
	name, owner string
	token       uint64
	ttl         time.Duration
	renewAt     time.Time
}

// liveSessionLocked returns the session if it is open and unexpired.
func (p *Proxy) liveSessionLocked(id string) *proxySession {
	s := p.sessions[id]
	if s == nil || s.ended || !p.clock.Now().Before(s.expires) {
		return nil
	}
	return s
}

// OpenSession implements Backend.
func (p *Proxy) OpenSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := storekit.ValidateTTL(ttl); err != nil {
		return Session{}, err
	}
	s := &proxySession{
		id: randid.Hex(16), ttl: ttl, leases: map[proxyLeaseKey]*proxySessionLease{},
		kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Session{}, leasehold.ErrClosed
	}
	s.expires = p.clock.Now().Add(ttl)
	p.sessions[s.id] = s
	p.wg.Add(1)
	go p.sessionLoop(s)
	return Session{ID: s.id, TTL: ttl, Remaining: ttl}, nil
}

// KeepAlive implements Backend: the session lives for its TTL from now.
func (p *Proxy) KeepAlive(ctx context.Context, id string) (Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Session{}, leasehold.ErrClosed
	}
	s := p.liveSessionLocked(id)
	if s == nil {
		return Session{}, ErrNoSession
	}
	s.expires = p.clock.Now().Add(s.ttl)
	return Session{ID: s.id, TTL: s.ttl, Remaining: s.ttl, Leases: len(s.leases)}, nil
}

// CloseSession implements Backend. The session's leases are released on
// the store before it returns.
func (p *Proxy) CloseSession(ctx context.Context, id string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return leasehold.ErrClosed
	}
	s := p.liveSessionLocked(id)
	if s == nil {
		p.mu.Unlock()
		return ErrNoSession
	}
	leases := p.endSessionLocked(s)
	p.mu.Unlock()
	p.releaseLeases(leases, EventReleased)
	return nil
}

// attach ties a grant to its session (when it has one); if the session
// expired or ended meanwhile the grant is released and ErrNoSession
// returned (the Engine checks the session and grants in one step).
func (p *Proxy) attach(s *proxySession, rec leasehold.Record, ttl time.Duration, t0 time.Time) (leasehold.Record, error) {
	if s == nil {
		return rec, nil
	}
	p.mu.Lock()
	if s.ended || !p.clock.Now().Before(s.expires) {
		p.mu.Unlock()
		p.releaseGrant(rec.Name, rec.Owner, rec.Token, EventReleased)
		return leasehold.Record{}, ErrNoSession
	}
	k := proxyLeaseKey{rec.Name, rec.Token}
	s.leases[k] = &proxySessionLease{name: rec.Name, owner: rec.Owner, token: rec.Token, ttl: ttl, renewAt: t0.Add(ttl / 3)}
	p.leaseSession[k] = s
	p.armLocked(s)
	p.mu.Unlock()
	return rec, nil
}

// armLocked makes s.timer fire at the session's next renewal or expiry,
// replacing a timer set for another time. p.mu held.
func (p *Proxy) armLocked(s *proxySession) {
	next := s.expires
	for _, l := range s.leases {
		if l.renewAt.Before(next) {
			next = l.renewAt
		}
	}
	if s.timer != nil && s.timerAt.Equal(next) {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer, s.timerAt = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0)), next
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (p *Proxy) detachLocked(k proxyLeaseKey) {
	if s := p.leaseSession[k]; s != nil {
		delete(s.leases, k)
		delete(p.leaseSession, k)
	}
}

// endSessionLocked ends s and returns the leases to release. The leases stay
// known as s's (ended) until their release is done, so that a renewal that
// comes meanwhile is refused.
func (p *Proxy) endSessionLocked(s *proxySession) []*proxySessionLease {
	s.ended = true
	delete(p.sessions, s.id)
	close(s.done)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	out := make([]*proxySessionLease, 0, len(s.leases))
	for _, l := range s.leases {
		out = append(out, l)
	}
	s.leases = nil
	return out
}

// releaseLeases releases the leases of ended sessions. A lease whose
// release failed is forgotten too: it stays on the store until its own TTL
// runs out, unless its holder renews it there.
func (p *Proxy) releaseLeases(leases []*proxySessionLease, typ EventType) {
	for _, l := range leases {
		p.releaseGrant(l.name, l.owner, l.token, typ)
		k := proxyLeaseKey{l.name, l.token}
		p.mu.Lock()
		if s := p.leaseSession[k]; s != nil && s.ended {
			delete(p.leaseSession, k)
		}
		p.mu.Unlock()
	}
}

// sessionLoop renews the session's leases on the store, each at a third of
// its TTL, and ends the session when it expires (by the proxy's clock).
func (p *Proxy) sessionLoop(s *proxySession) {
	defer p.wg.Done()
	var fired clock.Timer // the timer that woke the loop, now spent
	for {
		p.mu.Lock()
		if s.ended {
			p.mu.Unlock()
			return
		}
		if fired != nil && s.timer == fired {
			s.timer = nil
		}
		fired = nil
		now := p.clock.Now()
		if !now.Before(s.expires) {
			leases := p.endSessionLocked(s)
			p.mu.Unlock()
			p.log.Info("leasehold proxy: session expired", "session", s.id, "leases", len(leases))
			p.releaseLeases(leases, EventExpired)
			return
		}
		var due []proxySessionLease
		for _, l := range s.leases {
			if !l.renewAt.After(now) {
				due = append(due, *l)
			}
		}
		var t clock.Timer
		if len(due) == 0 {
			p.armLocked(s)
			t = s.timer
			select { // this timer is the current one: a pending kick is stale
			case <-s.kick:
			default:
			}
		}
		p.mu.Unlock()
		if len(due) > 0 {
			p.renewSessionLeases(s, due)
			continue
		}
		select {
		case <-t.C():
			fired = t
		case <-s.kick:
		case <-s.done:
			return
		}
	}
}

func (p *Proxy) renewSessionLeases(s *proxySession, due []proxySessionLease) {
	for _, l := range due {
		p.mu.Lock()
		over := s.ended || !p.clock.Now().Before(s.expires)
		p.mu.Unlock()
		if over {
			return // the loop ends the session and releases its leases
		}
		t0 := p.clock.Now()
		ctx, cancel := context.WithTimeout(p.ctx, max(l.ttl/3, time.Second))
		err := p.store.Renew(ctx, l.name, l.owner, l.token, l.ttl)
		cancel()
		k := proxyLeaseKey{l.name, l.token}
		p.mu.Lock()
		cur := s.leases[k]
		switch {
		case cur == nil: // released or session ended meanwhile
		case err == nil:
			cur.renewAt = t0.Add(l.ttl / 3)
		case errors.Is(err, leasehold.ErrNotHeld):
			p.detachLocked(k)
			p.log.Warn("leasehold proxy: session lease lost", "session", s.id, "name", l.name, "token", l.token)
		default:
			cur.renewAt = p.clock.Now().Add(max(l.ttl/10, time.Millisecond))
			p.log.Warn("leasehold proxy: session lease renewal failed, retrying", "session", s.id, "name", l.name, "err", err)
		}
		p.mu.Unlock()
	}
}
