package verify

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

func init() { workerModes["semaphore"] = semaphoreClient }

// semaphoreClient is the semaphore workload (R9): each logical process
// takes one permit of a semaphore of N = Cfg.Permits (a random name of
// Cfg.Keys) through leasehold.Semaphore, holds it — with the oracle, a
// fenced increment of the permit's own counter (keyed by the permit's
// lease name, fenced by the permit's token) — and releases it.
//
// It emits one "cs" event per permit held, keyed by the semaphore's name
// (so that Check with Permits N finds more than N holders at once), with
// the permit's token, the owner, and the permit's lease name
// (NAME/permit/I) in Msg, so that a suite can also check each permit on its
// own. From is when the grant returned, To the release call or the local
// deadline if earlier, as in the lock workload.
//
// Every permit is a lease of its own, recorded like any other (acquire,
// keepalive renewals, release, under the permit's lease name); only the
// semaphore's List of the holders is not recorded, and it changes nothing.
// So each permit's history is a plain lease history that porcupine checks.
// With Cfg.ErrorPause, an Acquire gives up at its first store error and the
// process waits ErrorPause (as the lock workload does).
func semaphoreClient(ctx context.Context, w *Worker, client int) {
	cfg := w.Cfg
	n := max(cfg.Permits, 1)
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
	for i := 0; cfg.Cycles == 0 || i < cfg.Cycles; i++ {
		if ctx.Err() != nil {
			return
		}
		name := cfg.Keys[rng.IntN(len(cfg.Keys))]
		sem, err := c.Semaphore(name, n)
		if err != nil {
			w.Logf("%s semaphore %s: %v", owner, name, err)
			return
		}
		actx, cancel := context.WithTimeout(ctx, cfg.AcquireTimeout)
		aopts := []leasehold.AcquireOption{leasehold.TTL(cfg.TTL)}
		var storeErr error
		if cfg.ErrorPause > 0 {
			aopts = append(aopts, leasehold.OnError(func(err error) { storeErr = err; cancel() }))
		}
		l, err := sem.Acquire(actx, aopts...)
		cancel()
		if err != nil {
			if storeErr != nil {
				err = storeErr
			}
			if ctx.Err() == nil {
				w.Logf("%s acquire a permit of %s: %v", owner, name, err)
			}
			if storeErr != nil {
				pauseAfterError(ctx, cfg.ErrorPause)
			}
			continue
		}
		from := Mono()
		b := &belief{k: k, l: l}
		b.held()
		wrote := false
		if cfg.Oracle != "" {
			wrote = criticalSection(ctx, w, client, rec.proc(), l.Name(), b)
		} else {
			if w.MidCS != nil {
				w.MidCS(client, l.Name(), l)
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
		w.Emit(Event{E: "cs", Proc: rec.proc(), Key: name, Owner: owner, Token: l.Token(), From: from, To: to,
			Wrote: wrote, Lost: l.Err() != nil, Msg: l.Name(), T: Mono()})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		if err := l.Release(rctx); err != nil && !errors.Is(err, leasehold.ErrLost) {
			w.Logf("%s release %s: %v", owner, l.Name(), err)
		}
		cancel()
	}
}

// pauseAfterError waits d (Cfg.ErrorPause) after an Acquire given up at a
// store error, or until ctx ends.
func pauseAfterError(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
