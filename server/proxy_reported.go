package server

// The proxy (proxy.go). The grants it reported lately: a store answers a
// repeated acquire of a request (its request id) with the same grant, and a
// repeated release of one's own grant as done, so the proxy cannot tell
// from the answer whether the call changed anything; what it reported
// before, it does not report (or count) again.

// reportedKeep bounds the grants a proxy remembers as granted, and those it
// remembers as released: the oldest is forgotten first. With names of up to
// 256 bytes each set is at most about 5 MiB.
const reportedKeep = 16384

// grantSet is a set of grants (name and token: a token is never reused on
// its name) bounded to the newest reportedKeep. Two releases of a grant, or
// a give-up and then its holder's release, each emitted a released event
// and counted the lease as freed (the red team's round on 6b7db6f); a
// repeated acquire of a request, or a try that took back a kept place
// granted meanwhile, each emitted a granted event and counted a lease
// (round 6, on a4b0a7c). The Engine, with its tombstones and request ids,
// emitted one. Guarded by Proxy.mu.
type grantSet struct {
	keys map[proxyLeaseKey]struct{}
	ring []proxyLeaseKey // insertion order; next is the oldest once full
	next int
}

// has reports whether k is in the set.
func (r *grantSet) has(k proxyLeaseKey) bool {
	_, ok := r.keys[k]
	return ok
}

// add puts k in the set, forgetting the oldest beyond reportedKeep.
func (r *grantSet) add(k proxyLeaseKey) {
	if r.keys == nil {
		r.keys = map[proxyLeaseKey]struct{}{}
	}
	if _, ok := r.keys[k]; ok {
		return
	}
	r.keys[k] = struct{}{}
	if len(r.ring) < reportedKeep {
		r.ring = append(r.ring, k)
		return
	}
	delete(r.keys, r.ring[r.next])
	r.ring[r.next] = k
	r.next = (r.next + 1) % reportedKeep
}

// newGrantLocked reports whether the grant k is new to this proxy's
// events, and if so remembers it and counts it as held. A grant reported
// before (the store answered a repeated acquire of its request with it) or
// released through the proxy is not new. p.mu held.
func (p *Proxy) newGrantLocked(k proxyLeaseKey) bool {
	if p.granted.has(k) || p.released.has(k) {
		return false
	}
	p.granted.add(k)
	p.held.Add(1)
	return true
}
