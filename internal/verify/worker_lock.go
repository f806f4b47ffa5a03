package verify

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// lockClient is the lock workload: acquire a random key, read the oracle's
// counter, hold, write the value plus one (fenced by the lease's token),
// release. It emits one "cs" event per grant: the interval during which it
// believed it held the lease.
func lockClient(ctx context.Context, w *Worker, client int) {
	cfg := w.Cfg
	rng := w.Rand(client)
	store, owner := w.Recorded(client)
	c, err := leasehold.New(store, leasehold.WithOwner(owner), leasehold.WithBackoff(5*time.Millisecond, cfg.TTL/4))
	if err != nil {
		w.Logf("client: %v", err)
		return
	}
	rec := store.(*recStore)
	for n := 0; cfg.Cycles == 0 || n < cfg.Cycles; n++ {
		if ctx.Err() != nil {
			return
		}
		key := cfg.Keys[rng.IntN(len(cfg.Keys))]
		actx, cancel := context.WithTimeout(ctx, cfg.AcquireTimeout)
		l, err := c.Acquire(actx, key, leasehold.TTL(cfg.TTL))
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.Logf("%s acquire %s: %v", owner, key, err)
			}
			continue
		}
		from := Mono()
		wrote := false
		if cfg.Oracle != "" {
			wrote = criticalSection(ctx, w, rec.proc(), key, l)
		} else if cfg.Hold > 0 {
			time.Sleep(cfg.Hold)
		}
		to := Mono()
		if dl := MonoOf(l.Deadline()); dl < to {
			to = dl
		}
		lost := l.Err() != nil
		w.Emit(Event{E: "cs", Proc: rec.proc(), Key: key, Token: l.Token(), From: from, To: to, Wrote: wrote, Lost: lost, T: Mono()})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		if err := l.Release(rctx); err != nil && !errors.Is(err, leasehold.ErrLost) {
			w.Logf("%s release %s: %v", owner, key, err)
		}
		cancel()
	}
}

// criticalSection reads the counter, holds, and writes it plus one. It
// reports whether the write was accepted.
func criticalSection(ctx context.Context, w *Worker, proc, key string, l *leasehold.Lease) bool {
	cfg := w.Cfg
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := w.OracleRead(octx, proc, key, l.Token())
	if err != nil {
		if !errors.Is(err, errStale) && ctx.Err() == nil {
			w.Logf("%s read %s: %v", proc, key, err)
		}
		return false
	}
	if cfg.Hold > 0 {
		time.Sleep(cfg.Hold)
	}
	deadline := l.Deadline()
	if !cfg.Naive && (!l.Held() || time.Until(deadline) < cfg.WriteMargin) {
		return false // no longer sure to hold it: do not write
	}
	if err := w.OracleWrite(octx, proc, key, l.Token(), v, MonoOf(deadline)); err != nil {
		if !errors.Is(err, errStale) && ctx.Err() == nil {
			w.Logf("%s write %s: %v", proc, key, err)
		}
		return false
	}
	return true
}
