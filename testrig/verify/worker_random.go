package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// randomClient is the linearizability workload (R2): random store-level
// operations — acquires (new, and retried with the same request id),
// renewals, releases, and renewals and releases with someone else's token —
// with short TTLs so that leases also expire under it. Every answer is
// recorded as the store gave it; the history goes to porcupine.
func randomClient(ctx context.Context, w *Worker, client int) {
	lp := w.proc(client)
	cfg, rng, s, owner := lp.cfg, lp.rng, lp.rec, lp.owner
	ttls := []time.Duration{cfg.TTL, cfg.TTL * 2}
	type mine struct {
		token uint64
		rid   string
		ttl   time.Duration
	}
	held := map[string]mine{}   // what this process believes it holds
	seen := map[string]uint64{} // a token seen held by someone else
	for n, key := range lp.cycles(ctx) {
		m, have := held[key]
		p := rng.IntN(100)
		octx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		var err error
		switch {
		case have && p < 35:
			err = s.Renew(octx, key, owner, m.token, m.ttl)
			if errors.Is(err, leasehold.ErrNotHeld) {
				delete(held, key)
			}
		case have && p < 75:
			err = s.Release(octx, key, owner, m.token)
			if err == nil || errors.Is(err, leasehold.ErrNotHeld) {
				delete(held, key)
			}
		case have && p < 90:
			_, err = s.TryAcquire(octx, leasehold.AcquireRequest{Name: key, Owner: owner, RequestID: m.rid, TTL: m.ttl})
		case !have && seen[key] != 0 && p < 10:
			err = s.Release(octx, key, owner, seen[key])
		case !have && seen[key] != 0 && p < 20:
			err = s.Renew(octx, key, owner, seen[key], ttls[0])
		default:
			ttl := ttls[rng.IntN(len(ttls))]
			rid := fmt.Sprintf("%s-%d", s.proc(), n)
			var r leasehold.Record
			r, err = s.TryAcquire(octx, leasehold.AcquireRequest{Name: key, Owner: owner, RequestID: rid, TTL: ttl})
			var he *leasehold.HeldError
			switch {
			case err == nil:
				held[key] = mine{token: r.Token, rid: rid, ttl: ttl}
			case errors.As(err, &he):
				seen[key] = he.Token
				if he.Owner != owner {
					delete(held, key)
				}
			}
		}
		cancel()
		if err != nil && !errors.Is(err, leasehold.ErrHeld) && !errors.Is(err, leasehold.ErrNotHeld) {
			// Indeterminate: the recorder has retired this process; what it
			// believed it held is unknown now.
			clear(held)
			if ctx.Err() == nil {
				w.Logf("%s: %v", owner, err)
			}
		}
		gap := cfg.Gap
		if gap <= 0 {
			gap = cfg.TTL / 2
		}
		time.Sleep(time.Duration(rng.Int64N(int64(gap))))
	}
}
