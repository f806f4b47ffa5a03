package server

// The proxy (proxy.go). The grants it released lately: a repeated release
// is answered by the store as done again, and must not be reported again.

// releasedKeep bounds the grants a proxy remembers as released: the
// oldest is forgotten first. With names of up to 256 bytes it is at most
// about 5 MiB.
const releasedKeep = 16384

// releasedSet is the set of grants most recently released through the
// proxy. A store answers a repeated release of one's own grant as done
// (Store.Release), so the proxy cannot tell from the answer whether it
// ended the grant: two releases of a grant, or a give-up and then its
// holder's release, each emitted a released event and counted the lease as
// freed (the red team's round on 6b7db6f; the Engine, with its tombstones,
// emitted one). Guarded by Proxy.mu.
type releasedSet struct {
	keys map[proxyLeaseKey]struct{}
	ring []proxyLeaseKey // insertion order; next is the oldest once full
	next int
}

// has reports whether k was released through the proxy lately.
func (r *releasedSet) has(k proxyLeaseKey) bool {
	_, ok := r.keys[k]
	return ok
}

// add remembers k as released, forgetting the oldest beyond releasedKeep.
func (r *releasedSet) add(k proxyLeaseKey) {
	if r.keys == nil {
		r.keys = map[proxyLeaseKey]struct{}{}
	}
	if _, ok := r.keys[k]; ok {
		return
	}
	r.keys[k] = struct{}{}
	if len(r.ring) < releasedKeep {
		r.ring = append(r.ring, k)
		return
	}
	delete(r.keys, r.ring[r.next])
	r.ring[r.next] = k
	r.next = (r.next + 1) % releasedKeep
}
