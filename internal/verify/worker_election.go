package verify

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

func init() { workerModes["election"] = electionClient }

// electionClient is the leader-election workload (R9): each logical
// process campaigns (leasehold.Election.Campaign) in an election named by a
// random one of Cfg.Keys; once it leads, it does 1–3 rounds of leader's
// work — with the oracle, a fenced increment of the election's counter
// under its term; without, a hold of Cfg.Hold — checking before each that
// it still leads, then resigns (releases the lease), waits up to TTL/4 and
// campaigns again.
//
// It emits one "cs" event per leadership, keyed by the election's name,
// with the term (the leader lease's fencing token) in Token and the
// leader's identity in Owner. From is when Campaign returned (the process
// learned it leads); To is when it stopped leading — it resigned, or found
// its leadership lost — or its local deadline if that came first. Check
// with Permits 1 finds two leaders at once; a suite checks the terms
// themselves (one leader per term, terms increasing over time).
func electionClient(ctx context.Context, w *Worker, client int) {
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
	for i := 0; cfg.Cycles == 0 || i < cfg.Cycles; i++ {
		if ctx.Err() != nil {
			return
		}
		name := cfg.Keys[rng.IntN(len(cfg.Keys))]
		cctx, cancel := context.WithTimeout(ctx, cfg.AcquireTimeout)
		eopts := []leasehold.AcquireOption{leasehold.TTL(cfg.TTL)}
		var storeErr error
		if cfg.ErrorPause > 0 {
			eopts = append(eopts, leasehold.OnError(func(err error) { storeErr = err; cancel() }))
		}
		e, err := c.Election(name, eopts...)
		if err != nil {
			cancel()
			w.Logf("%s election %s: %v", owner, name, err)
			return
		}
		l, err := e.Campaign(cctx)
		cancel()
		if err != nil {
			if storeErr != nil {
				err = storeErr
			}
			if ctx.Err() == nil {
				w.Logf("%s campaign %s: %v", owner, name, err)
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
		for r := 1 + rng.IntN(3); r > 0 && ctx.Err() == nil && b.held(); r-- {
			if cfg.Oracle != "" {
				if criticalSection(ctx, w, client, rec.proc(), name, b) {
					wrote = true
				}
				continue
			}
			if w.MidCS != nil {
				w.MidCS(client, name, l)
			}
			if cfg.Hold > 0 {
				time.Sleep(cfg.Hold)
			}
		}
		b.held()
		to := Mono()
		if k != nil {
			to = b.last
		} else if dl := MonoOf(l.Deadline()); dl < to {
			to = dl
		}
		w.Emit(Event{E: "cs", Proc: rec.proc(), Key: name, Owner: owner, Token: l.Token(), From: from, To: to,
			Wrote: wrote, Lost: l.Err() != nil, T: Mono()})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		if err := l.Release(rctx); err != nil && !errors.Is(err, leasehold.ErrLost) {
			w.Logf("%s resign %s: %v", owner, name, err)
		}
		cancel()
		if gap := cfg.TTL / 4; gap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(rng.Int64N(int64(gap)))):
			}
		}
	}
}
