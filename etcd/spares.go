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
// seconds), granted in the background after each grant uses one.
//
// A spare's clock started when it was granted, before the acquire began,
// so a grant on a spare could expire on etcd before its holder's local
// deadline. The store therefore refreshes the spare (KeepAliveOnce, which
// is answered by the etcd leader from memory) concurrently with the
// acquire Txn, and only reports the grant after both succeeded: etcd then
// expires it no earlier than one etcd TTL (>= the leasehold TTL) after the
// refresh, which happened after the call began. A spare is used only while
// less than half its TTL has passed since it was granted or refreshed, so
// it cannot expire between the Txn and the refresh.

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
	mu sync.Mutex
	m  map[int64][]leaseRef // by requested TTL in seconds
}

func newPool() *pool { return &pool{m: map[int64][]leaseRef{}} }

// take returns a fresh spare for secs, if there is one, and the stale ones
// it found on the way.
func (p *pool) take(secs int64, now time.Time) (sp leaseRef, ok bool, stale []leaseRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.m[secs]
	for len(list) > 0 {
		sp, list = list[len(list)-1], list[:len(list)-1]
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
	now := time.Now()
	sp, ok, stale := s.spares.take(secs, now)
	for _, st := range stale {
		s.revokeLater(st.id)
	}
	if ok {
		g := grantLease{leaseRef: sp, secs: secs, refresh: make(chan error, 1)}
		g.born = now
		go func() {
			_, err := s.cli.KeepAliveOnce(ctx, sp.id)
			g.refresh <- err
		}()
		return g, nil
	}
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return grantLease{}, s.fail(ctx, "grant", err)
	}
	return grantLease{leaseRef: leaseRef{id: resp.ID, granted: resp.TTL, born: now}, secs: secs}, nil
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

// refill grants a spare for secs in the background.
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
