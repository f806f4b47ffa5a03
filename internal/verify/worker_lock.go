package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// lockClient is the lock workload: acquire a random key, read the oracle's
// counter, hold, write the value plus one (fenced by the lease's token),
// release. It emits one "cs" event per grant: the interval during which it
// believed it held the lease.
func lockClient(ctx context.Context, w *Worker, client int) {
	cfg := w.Cfg
	rng := w.Rand(client)
	store, owner := w.Recorded(client)
	rec := store.(*recStore)
	k := w.clock(client)
	opts := []leasehold.Option{leasehold.WithOwner(owner), leasehold.WithBackoff(5*time.Millisecond, cfg.TTL/4)}
	if k != nil {
		opts = append(opts, leasehold.WithClock(k))
	}
	if w.Wrap != nil {
		store = w.Wrap(client, store)
	}
	c, err := leasehold.New(store, opts...)
	if err != nil {
		w.Logf("client: %v", err)
		return
	}
	for n := 0; cfg.Cycles == 0 || n < cfg.Cycles; n++ {
		if ctx.Err() != nil {
			return
		}
		key := cfg.Keys[rng.IntN(len(cfg.Keys))]
		l, err := acquireLock(ctx, w, c, rng, owner, key)
		if err != nil {
			if ctx.Err() == nil {
				w.Logf("%s acquire %s: %v", owner, key, err)
			}
			continue
		}
		from := Mono()
		b := &belief{k: k, l: l}
		b.held()
		wrote := false
		if cfg.Oracle != "" {
			wrote = criticalSection(ctx, w, client, rec.proc(), key, b)
		} else {
			if w.MidCS != nil {
				w.MidCS(client, key, l)
			}
			if cfg.Hold > 0 {
				time.Sleep(cfg.Hold)
			}
			b.held()
		}
		to := Mono()
		if k != nil {
			to = b.last
		} else if dl := MonoOf(l.Deadline()); dl < to {
			to = dl
		}
		lost := l.Err() != nil
		w.Emit(Event{E: "cs", Proc: rec.proc(), Key: key, Token: l.Token(), From: from, To: to, Wrote: wrote, Lost: lost, T: Mono()})
		releaseLock(ctx, w, l, owner, key)
	}
}

// releaseRetries is how often a release that failed with a store error is
// tried again when cfg.ErrorPause is set.
const releaseRetries = 4

// releaseLock releases l. With cfg.ErrorPause set, a release that failed
// with a store error (outcome unknown) is tried again after ErrorPause, a
// few times: a lease whose release was lost stays held until it expires,
// and on a store that gives recovered leases a fresh TTL at each restart
// (etcd, the lease server) it never does while restarts keep coming.
func releaseLock(ctx context.Context, w *Worker, l *leasehold.Lease, owner, key string) {
	cfg := w.Cfg
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		err := l.Release(rctx)
		cancel()
		if err == nil || errors.Is(err, leasehold.ErrLost) {
			return
		}
		w.Logf("%s release %s: %v", owner, key, err)
		if cfg.ErrorPause <= 0 || attempt == releaseRetries || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.ErrorPause):
		}
	}
}

// acquireLock takes key within cfg.AcquireTimeout. With cfg.ErrorPause set,
// a store error ends the attempt, and after ErrorPause it starts again with
// the same request id, so that a grant whose reply was lost is handed back
// (a retry) instead of being left to expire, while a store that is down
// sees (and the history records) one indeterminate attempt per pause
// rather than one per backoff step.
func acquireLock(ctx context.Context, w *Worker, c *leasehold.Client, rng *rand.Rand, owner, key string) (*leasehold.Lease, error) {
	cfg := w.Cfg
	actx, cancel := context.WithTimeout(ctx, cfg.AcquireTimeout)
	defer cancel()
	if cfg.ErrorPause <= 0 {
		return c.Acquire(actx, key, leasehold.TTL(cfg.TTL))
	}
	reqID := fmt.Sprintf("%016x", rng.Uint64())
	for {
		tctx, stop := context.WithCancel(actx)
		var storeErr error
		l, err := c.Acquire(tctx, key, leasehold.TTL(cfg.TTL), leasehold.RequestID(reqID),
			leasehold.OnError(func(err error) { storeErr = err; stop() }))
		stop()
		if err == nil || storeErr == nil || actx.Err() != nil {
			return l, err
		}
		w.Logf("%s acquire %s: %v (again in %s)", owner, key, storeErr, cfg.ErrorPause)
		select {
		case <-actx.Done():
			return nil, storeErr
		case <-time.After(cfg.ErrorPause):
		}
	}
}

// belief is what a holder knows of its lease. On an injected clock (k not
// nil) the local deadline is a reading of a clock that does not keep real
// time, so it cannot be converted to Mono as the real clock's can: the
// critical section is recorded as ending at last, the latest real instant
// at which the lease was found held (taken before the check, so never later
// than the moment the holder stopped believing it held).
type belief struct {
	k    clock.Clock
	l    *leasehold.Lease
	last int64
}

func (b *belief) held() bool {
	t := Mono()
	if !b.l.Held() {
		return false
	}
	b.last = t
	return true
}

// remaining is the time left before the local deadline, on the holder's
// clock.
func (b *belief) remaining() time.Duration {
	if b.k == nil {
		return time.Until(b.l.Deadline())
	}
	return b.l.Deadline().Sub(b.k.Now())
}

// criticalSection reads the counter, holds, and writes it plus one. It
// reports whether the write was accepted.
func criticalSection(ctx context.Context, w *Worker, client int, proc, key string, b *belief) bool {
	cfg := w.Cfg
	l := b.l
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := w.OracleRead(octx, proc, key, l.Token())
	if err != nil {
		if !errors.Is(err, errStale) && ctx.Err() == nil {
			w.Logf("%s read %s: %v", proc, key, err)
		}
		return false
	}
	if w.MidCS != nil {
		w.MidCS(client, key, l)
	}
	if cfg.Hold > 0 {
		time.Sleep(cfg.Hold)
	}
	if held := b.held(); !cfg.Naive && (!held || b.remaining() < cfg.WriteMargin) {
		return false // no longer sure to hold it: do not write
	}
	var deadline int64 // sent to the oracle only where it converts to Mono
	if b.k == nil {
		deadline = MonoOf(l.Deadline())
	}
	if err := w.OracleWrite(octx, proc, key, l.Token(), v, deadline); err != nil {
		if !errors.Is(err, errStale) && ctx.Err() == nil {
			w.Logf("%s write %s: %v", proc, key, err)
		}
		return false
	}
	return true
}
