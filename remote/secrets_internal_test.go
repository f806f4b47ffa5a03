package remote

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// TestHolderSecretsBounded: secrets of grants that were neither renewed
// nor released are swept once their TTL and the grace have passed, so a
// client that acquires without end keeps only about as many secrets as
// grants it could still hold; a session's go when it ends; renew and
// release settle them by their answer.
func TestHolderSecretsBounded(t *testing.T) {
	h := newHolderSecrets()
	now := time.Unix(1_000_000, 0)
	h.now = func() time.Time { return now }
	ttl := 10 * time.Second
	most := 0
	for i := 0; i < 300_000; i++ {
		h.put(leasehold.Record{Name: "n", Owner: "o", Token: uint64(i + 1), TTL: ttl}, "s", "")
		now = now.Add(time.Millisecond) // 1,000 grants a second
		most = max(most, h.len())
	}
	// Live at once: (TTL + grace) × 1,000/s = 70,000; a sweep runs at
	// twice what the last one left.
	if live := int((ttl + secretGrace) / time.Millisecond); most > 2*live+1 {
		t.Errorf("%d secrets kept at most, want at most about %d", most, 2*live)
	}
	now = now.Add(ttl + secretGrace + time.Second)
	for i := 0; i < secretSweepMin*4; i++ {
		h.put(leasehold.Record{Name: "m", Owner: "o", Token: uint64(i + 1), TTL: ttl}, "s", "")
	}
	if n := h.len(); n > secretSweepMin*8 {
		t.Errorf("%d secrets kept after all the old grants expired; want the %d new ones (and not many more)", n, secretSweepMin*4)
	}

	// A renewal keeps a secret on past its first TTL; a sweep then keeps it.
	h = newHolderSecrets()
	h.now = func() time.Time { return now }
	h.put(leasehold.Record{Name: "r", Owner: "o", Token: 1, TTL: ttl}, "keep", "")
	now = now.Add(ttl)
	h.settle("r", "o", 1, time.Hour, nil)
	now = now.Add(secretGrace + time.Second)
	h.sweepLocked(now)
	if h.get("r", "o", 1) != "keep" {
		t.Error("a renewed grant's secret was swept")
	}
	for _, err := range []error{errors.New("unreachable (the outcome is unknown)"), fmt.Errorf("x: %w", ErrBadProof)} {
		h.put(leasehold.Record{Name: "r", Owner: "o", Token: 2, TTL: ttl}, "s2", "")
		h.settle("r", "o", 2, 0, err)
		if kept := h.get("r", "o", 2) != ""; kept != !errors.Is(err, leasehold.ErrNotHeld) {
			t.Errorf("release answered %v: secret kept %v", err, kept)
		}
	}
	// A released grant's secret is kept for secretGrace, so that the
	// release can be repeated, then swept.
	h.settle("r", "o", 1, 0, nil)
	if h.get("r", "o", 1) != "keep" {
		t.Error("a released grant's secret was dropped at once: a repeated release would be refused")
	}
	now = now.Add(secretGrace + time.Second)
	h.sweepLocked(now)
	if h.get("r", "o", 1) != "" {
		t.Error("a released grant's secret is kept past secretGrace")
	}

	// Session grants: kept past their TTL while the session lives, dropped
	// when it ends; an empty secret keeps nothing.
	for i := 0; i < 3; i++ {
		h.put(leasehold.Record{Name: fmt.Sprintf("s/%d", i), Owner: "o", Token: 1, TTL: ttl}, "s", "sess-1")
	}
	h.put(leasehold.Record{Name: "t", Owner: "o", Token: 1, TTL: ttl}, "s", "sess-2")
	h.put(leasehold.Record{Name: "none", Owner: "o", Token: 1, TTL: ttl}, "", "")
	now = now.Add(time.Hour)
	h.sweepLocked(now)
	if h.len() != 4 {
		t.Fatalf("%d secrets, want the 4 session grants'", h.len())
	}
	h.dropSession("sess-1")
	if h.len() != 1 || h.get("t", "o", 1) == "" || len(h.sessions) != 1 {
		t.Errorf("after sess-1 ended: %d secrets, sessions %v", h.len(), h.sessions)
	}
	h.settle("t", "o", 1, 0, nil)
	if h.len() != 1 || len(h.sessions) != 0 {
		t.Errorf("after the release: %d secrets, sessions %v; want its secret kept a while, apart from the session", h.len(), h.sessions)
	}
	var nilH *holderSecrets
	nilH.put(leasehold.Record{Name: "x"}, "s", "")
	if nilH.get("x", "", 0) != "" {
		t.Error("a nil holderSecrets keeps secrets")
	}
}
