package remote

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// Holder proofs.
//
// A lease server with holder proofs on answers each grant with a secret,
// given only to the client that acquired it; renewing or releasing the
// grant takes that secret, so that whoever can read a lease's owner and
// token (every reader) still cannot act as its holder. The stores of this
// package keep the secrets of the grants they acquired, and send them with
// Renew and Release. A secret is dropped when its grant is released, when
// the server says the grant is no longer held, when the session the grant
// is attached to ends, and otherwise some time after the grant's TTL ran
// out without a renewal, so that the secrets kept are never many more
// than the grants held.

// ErrBadProof is the server's refusal of a renew or release whose holder
// proof (the secret returned with the grant) is missing or does not match:
// this client did not acquire the grant (or no longer keeps its secret),
// or the server's holder key changed since the grant was made. Nothing
// was changed. It matches leasehold.ErrNotHeld too: a client that cannot
// prove holding a grant cannot renew or release it.
var ErrBadProof = fmt.Errorf("%w: the holder proof (the grant's secret) is missing or does not match; only the client that acquired the grant can renew or release it", leasehold.ErrNotHeld)

// secretGrace is how long past its TTL (counted from its acquire or last
// renewal) a grant's secret is kept: a release soon after the expiry may
// still find the grant remembered by the server.
const secretGrace = time.Minute

// secretSweepMin is the size of the map below which expired secrets are
// not swept.
const secretSweepMin = 1024

type grantKey struct {
	name, owner string
	token       uint64
}

type grantSecret struct {
	secret  string
	until   time.Time // when it may be dropped; zero: while its session lives
	session string
}

// holderSecrets are the secrets of the grants one client acquired. Its
// methods are safe for concurrent use; a nil *holderSecrets keeps nothing.
type holderSecrets struct {
	mu       sync.Mutex
	m        map[grantKey]grantSecret
	sessions map[string]map[grantKey]struct{}
	sweepAt  int              // sweep when the map grows to this size
	swept    time.Time        // or when a grace has passed since the last sweep
	now      func() time.Time // tests
}

func newHolderSecrets() *holderSecrets {
	return &holderSecrets{
		m:        map[grantKey]grantSecret{},
		sessions: map[string]map[grantKey]struct{}{},
		sweepAt:  secretSweepMin,
		now:      time.Now,
	}
}

// put keeps the secret of rec's grant. A grant attached to a session is
// kept while the session lives (until dropSession); others until
// secretGrace past their TTL. An empty secret (a server without holder
// proofs) keeps nothing.
func (h *holderSecrets) put(rec leasehold.Record, secret, session string) {
	if h == nil || secret == "" {
		return
	}
	k := grantKey{rec.Name, rec.Owner, rec.Token}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if len(h.m) >= h.sweepAt || len(h.m) > 0 && now.Sub(h.swept) >= secretGrace {
		h.sweepLocked(now)
	}
	h.unindexLocked(k)
	g := grantSecret{secret: secret, session: session}
	if session == "" {
		g.until = now.Add(rec.TTL + secretGrace)
	} else {
		ks := h.sessions[session]
		if ks == nil {
			ks = map[grantKey]struct{}{}
			h.sessions[session] = ks
		}
		ks[k] = struct{}{}
	}
	h.m[k] = g
}

// get returns the grant's secret, or "".
func (h *holderSecrets) get(name, owner string, token uint64) string {
	if h == nil {
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[grantKey{name, owner, token}].secret
}

// renewed moves the time a grant's secret is kept on after a renewal to
// ttl.
func (h *holderSecrets) renewed(name, owner string, token uint64, ttl time.Duration) {
	if h == nil {
		return
	}
	k := grantKey{name, owner, token}
	h.mu.Lock()
	defer h.mu.Unlock()
	if g, ok := h.m[k]; ok && g.session == "" {
		g.until = h.now().Add(ttl + secretGrace)
		h.m[k] = g
	}
}

// drop forgets a grant's secret.
func (h *holderSecrets) drop(name, owner string, token uint64) {
	if h == nil {
		return
	}
	k := grantKey{name, owner, token}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unindexLocked(k)
	delete(h.m, k)
}

// dropSession forgets the secrets of the grants attached to a session
// that ended (the server frees them).
func (h *holderSecrets) dropSession(id string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.sessions[id] {
		delete(h.m, k)
	}
	delete(h.sessions, id)
}

func (h *holderSecrets) unindexLocked(k grantKey) {
	if g, ok := h.m[k]; ok && g.session != "" {
		delete(h.sessions[g.session], k)
		if len(h.sessions[g.session]) == 0 {
			delete(h.sessions, g.session)
		}
	}
}

// sweepLocked drops the secrets kept past their time. The next sweep is
// when the map has doubled from what is left, or a grace later, whichever
// comes first (amortised O(1) per put, and a map no larger than twice its
// live secrets plus those of one grace's puts).
func (h *holderSecrets) sweepLocked(now time.Time) {
	h.swept = now
	for k, g := range h.m {
		if g.session == "" && now.After(g.until) {
			delete(h.m, k)
		}
	}
	h.sweepAt = max(2*len(h.m), secretSweepMin)
}

// len is the number of secrets kept (tests).
func (h *holderSecrets) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// settle updates the secrets after a renew (ttl > 0) or release (ttl 0)
// of the grant answered err: a success of a renew keeps the secret on; a
// success of a release keeps it for secretGrace more, so that the release
// can be repeated (the server answers a repeat with the secret as it
// answered the first; without it, a bad proof); an answer that the grant
// is not held (a bad proof included) drops it; other errors (the outcome
// unknown) keep it for a retry.
func (h *holderSecrets) settle(name, owner string, token uint64, ttl time.Duration, err error) {
	switch {
	case err == nil && ttl > 0:
		h.renewed(name, owner, token, ttl)
	case err == nil:
		h.released(name, owner, token)
	case errors.Is(err, leasehold.ErrNotHeld), errors.Is(err, leasehold.ErrNotFound):
		h.drop(name, owner, token)
	}
}

// released keeps a released grant's secret for secretGrace from now,
// apart from any session (whose end no longer concerns it).
func (h *holderSecrets) released(name, owner string, token uint64) {
	if h == nil {
		return
	}
	k := grantKey{name, owner, token}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.m[k]
	if !ok {
		return
	}
	h.unindexLocked(k)
	g.session, g.until = "", h.now().Add(secretGrace)
	h.m[k] = g
}

// importSecret keeps a secret handed over from elsewhere as the grant's
// (for secretGrace, moved on by renewals).
func (h *holderSecrets) importSecret(name, owner string, token uint64, secret string) {
	h.put(leasehold.Record{Name: name, Owner: owner, Token: token}, secret, "")
}
