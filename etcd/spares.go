package etcd

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Spare etcd leases. Granting an etcd lease is a round trip (and a raft
// write) of its own, and etcd cannot grant one inside a transaction, so a
// cold TryAcquire takes two round trips: Grant, then the acquire Txn. To
// make it one, the store keeps a few spare leases per TTL (in whole
// seconds). A released grant's etcd lease becomes a spare (it has no key
// left), so a store that acquires and releases in turn writes to etcd's
// raft log twice per pair, as etcd's own Mutex does; only when no spare is
// left is one granted in the background after a grant.
//
// A spare's clock started before the acquire began, so a grant on a spare
// could expire on etcd before its holder's local deadline. The store
// therefore refreshes the spare (KeepAliveOnce, which the etcd leader
// answers from memory) concurrently with the acquire Txn, and reports the
// grant only after both succeeded: etcd then expires it no earlier than one
// etcd TTL (>= the leasehold TTL) after the refresh, which happened after
// the call began. A spare is used only while less than half its TTL has
// passed since it was granted or last refreshed, so it cannot expire
// between the Txn and the refresh.
//
// Reusing an etcd lease must not let a renewal of the grant that used it
// before extend the grant that uses it now. Renewals check their grant's
// key and then refresh its lease; a release that overtakes such a renewal
// in between would let the refresh land on the next grant. So a released
// lease is reused only if this store knows when it was last refreshed and
// no renewal or retried acquire of that name is in flight in this store
// (those mark the name before they read the key); otherwise it is
// revoked. A renewal from another process racing with a release of the
// same grant could still extend one later grant of this store by at most
// one etcd TTL: late expiry, never early.

const (
	maxSparesPerTTL = 4
	maxSpareTTLs    = 16
)

// leaseRef is an etcd lease the store granted.
type leaseRef struct {
	id      clientv3.LeaseID
	granted int64     // its TTL in seconds, as etcd granted it
	born    time.Time // taken before the request that granted or last refreshed it was sent
}

func (l leaseRef) fresh(now time.Time) bool {
	return now.Sub(l.born) < time.Duration(l.granted)*time.Second/2
}

type pool struct {
	mu     sync.Mutex
	m      map[int64][]leaseRef           // spares, by requested TTL in seconds
	known  map[clientv3.LeaseID]leaseRef  // etcd leases of grants made here, with their last refresh
	busy   map[string]int                 // names with a renewal or retried acquire in flight
	grants map[string]grantRef            // by name: the etcd lease of the latest grant made or renewed here
	seen   map[clientv3.LeaseID]time.Time // etcd leases of others' grants: alive at least until then
}

// grantRef is the etcd lease of a grant.
type grantRef struct {
	owner string
	token uint64
	lease clientv3.LeaseID
}

// maxKnown is the size of the known map above which entries of leases
// that have expired by now are dropped.
const maxKnown = 8192

func newPool() *pool {
	return &pool{m: map[int64][]leaseRef{}, known: map[clientv3.LeaseID]leaseRef{}, busy: map[string]int{},
		grants: map[string]grantRef{}, seen: map[clientv3.LeaseID]time.Time{}}
}

// setGrant records that the grant of name to owner with token is on etcd
// lease id (none: forget the name's grant).
func (p *pool) setGrant(name, owner string, token uint64, id clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id == clientv3.NoLease {
		delete(p.grants, name)
		return
	}
	if len(p.grants) >= maxKnown {
		for n := range p.grants { // drop an arbitrary half
			if delete(p.grants, n); len(p.grants) < maxKnown/2 {
				break
			}
		}
	}
	p.grants[name] = grantRef{owner: owner, token: token, lease: id}
}

// aliveUntil returns a moment until which etcd lease id is known to be
// alive, by the local monotonic clock: one etcd TTL after this store last
// refreshed it or learned its remaining time (less 1 % for clock rate
// differences). etcd leases are only ever extended or revoked, and a
// revoked lease's keys are gone, so a key read on that lease before then
// is live.
func (p *pool) aliveUntil(id clientv3.LeaseID) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.seen[id]
	if k, known := p.known[id]; known {
		d := time.Duration(k.granted) * time.Second
		if u := k.born.Add(d - d/100); !ok || u.After(t) {
			t, ok = u, true
		}
	}
	return t, ok
}

// saw records that etcd lease id is alive until at least t.
func (p *pool) saw(id clientv3.LeaseID, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) >= maxKnown {
		now := time.Now()
		for k, u := range p.seen {
			if u.Before(now) {
				delete(p.seen, k)
			}
		}
		if len(p.seen) >= maxKnown {
			clear(p.seen)
		}
	}
	if u, ok := p.seen[id]; !ok || t.After(u) {
		p.seen[id] = t
	}
}

// knownRef returns what the store knows of etcd lease id.
func (p *pool) knownRef(id clientv3.LeaseID) (leaseRef, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.known[id]
	return l, ok
}

// grant returns the etcd lease recorded for the grant of name to owner
// with token.
func (p *pool) grant(name, owner string, token uint64) (clientv3.LeaseID, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.grants[name]
	return g.lease, ok && g.token == token && g.owner == owner
}

// note records that a grant uses l, refreshed at l.born.
func (p *pool) note(l leaseRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) >= maxKnown {
		now := time.Now()
		for id, k := range p.known {
			if now.Sub(k.born) > time.Duration(k.granted)*time.Second {
				delete(p.known, id)
			}
		}
	}
	p.known[l.id] = l
}

// forget drops a lease from the known ones and returns what was known.
func (p *pool) forget(id clientv3.LeaseID) (leaseRef, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.known[id]
	delete(p.known, id)
	return l, ok
}

// enter marks name as having a renewal or retried acquire in flight; the
// returned func unmarks it.
func (p *pool) enter(name string) func() {
	p.mu.Lock()
	p.busy[name]++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.busy[name]--; p.busy[name] <= 0 {
			delete(p.busy, name)
		}
	}
}

func (p *pool) isBusy(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.busy[name] > 0
}

// take returns a fresh spare for secs, if there is one, and the stale ones
// it found on the way.
func (p *pool) take(secs int64, now time.Time) (sp leaseRef, ok bool, stale []leaseRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.m[secs]
	for len(list) > 0 {
		sp, list = list[len(list)-1], list[:len(list)-1]
		// Taken, a spare is no longer the lease of a grant made here
		// until its new grant notes it again. A waiter's prepared lease
		// (queue_entries.go) is noted only when the waiter takes a
		// handoff on it: a handoff released by a waiter that had given up
		// must not put the lease back among the spares, since the waiter
		// revokes it when it finishes (another grant made on it meanwhile
		// vanished with it: the conformance suite saw a second holder).
		delete(p.known, sp.id)
		if sp.fresh(now) {
			ok = true
			break
		}
		stale = append(stale, sp)
	}
	if len(list) == 0 {
		delete(p.m, secs)
	} else {
		p.m[secs] = list
	}
	return sp, ok, stale
}

// put keeps sp as a spare; it reports false when the pool is full.
func (p *pool) put(secs int64, sp leaseRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	list, known := p.m[secs]
	if len(list) >= maxSparesPerTTL || (!known && len(p.m) >= maxSpareTTLs) {
		return false
	}
	p.m[secs] = append(list, sp)
	return true
}

// empty reports whether there is no spare for secs.
func (p *pool) empty(secs int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m[secs]) == 0
}

func (p *pool) drain() []leaseRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []leaseRef
	for _, list := range p.m {
		all = append(all, list...)
	}
	p.m = map[int64][]leaseRef{}
	return all
}

// grantLease is the etcd lease an acquire or renewal puts a key on.
type grantLease struct {
	leaseRef
	secs    int64
	refresh chan error // a spare's refresh in flight; nil for a new lease
}

// obtain returns a lease for a grant of secs seconds: a spare, whose
// refresh it starts, or a newly granted one.
func (s *Store) obtain(ctx context.Context, secs int64) (grantLease, error) {
	if g, ok := s.spare(ctx, secs); ok {
		return g, nil
	}
	now := time.Now()
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return grantLease{}, s.fail(ctx, "grant", err)
	}
	return grantLease{leaseRef: leaseRef{id: resp.ID, granted: resp.TTL, born: now}, secs: secs}, nil
}

// spare returns a fresh spare for secs, whose refresh it starts, if the
// pool has one.
func (s *Store) spare(ctx context.Context, secs int64) (grantLease, bool) {
	now := time.Now()
	sp, ok, stale := s.spares.take(secs, now)
	for _, st := range stale {
		s.revokeLater(st.id)
	}
	if !ok {
		return grantLease{}, false
	}
	g := grantLease{leaseRef: sp, secs: secs, refresh: make(chan error, 1)}
	g.born = now
	go func() {
		if s.spareHook != nil {
			g.refresh <- s.spareHook(ctx, func(ctx context.Context) error { return s.refresher.refresh(ctx, sp.id) })
			return
		}
		g.refresh <- s.refresher.refresh(ctx, sp.id)
	}()
	return g, true
}

// settle waits for the refresh of a spare (nil for a new lease).
func (g *grantLease) settle() error {
	if g.refresh == nil {
		return nil
	}
	err := <-g.refresh
	g.refresh = nil
	return err
}

// unused hands back a lease that no key was put on.
func (s *Store) unused(g grantLease, refreshErr error) {
	if refreshErr != nil || !s.spares.put(g.secs, g.leaseRef) {
		s.revokeLater(g.id)
	}
}

// used notes that a grant now uses g, and grants a spare in the
// background if none is left for its TTL.
func (s *Store) used(g grantLease) {
	s.spares.note(g.leaseRef)
	if !s.spares.empty(g.secs) {
		return
	}
	s.refill(g.secs)
}

// noteGrant records the etcd lease of a grant made or renewed here, so
// that its renewals need not read it first.
func (s *Store) noteGrant(name, owner string, token uint64, l leaseRef) {
	s.spares.setGrant(name, owner, token, l.id)
}

// refill grants a spare of secs seconds in the background.
func (s *Store) refill(secs int64) {
	s.background(func(ctx context.Context) {
		now := time.Now()
		resp, err := s.cli.Grant(ctx, secs)
		if err != nil {
			return
		}
		if !s.spares.put(secs, leaseRef{id: resp.ID, granted: resp.TTL, born: now}) || ctx.Err() != nil {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = s.cli.Revoke(rctx, resp.ID)
		}
	})
}

// replaced handles an etcd lease that a grant no longer uses: the lease
// of a released grant (whose key, with value val, the release deleted)
// becomes a spare if that is safe (see above); any other is revoked.
func (s *Store) replaced(name string, id clientv3.LeaseID, released bool, val []byte) {
	ref, known := s.spares.forget(id)
	if released && known && !s.spares.isBusy(name) {
		rec, err := decodeRecord(val)
		if secs := leaseSeconds(rec.ttl); err == nil && ref.granted >= secs && ref.fresh(time.Now()) && s.spares.put(secs, ref) {
			return
		}
	}
	s.revokeLater(id)
}
