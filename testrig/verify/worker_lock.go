package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
)

// acquireLock takes key within cfg.AcquireTimeout. With cfg.ErrorPause set,
// a store error ends the attempt, and after ErrorPause it starts again with
// the same request id, so that a grant whose reply was lost is handed back
// (a retry) instead of being left to expire, while a store that is down
// sees (and the history records) one indeterminate attempt per pause
// rather than one per backoff step.
func acquireLock(ctx context.Context, p *proc, c *leasehold.Client, key string) (*leasehold.Lease, error) {
	cfg := p.cfg
	actx, cancel := context.WithTimeout(ctx, cfg.AcquireTimeout)
	defer cancel()
	if cfg.ErrorPause <= 0 {
		return c.Acquire(actx, key, leasehold.TTL(cfg.TTL))
	}
	reqID := fmt.Sprintf("%016x", p.rng.Uint64())
	for {
		tctx, stop := context.WithCancel(actx)
		var storeErr error
		l, err := c.Acquire(tctx, key, leasehold.TTL(cfg.TTL), leasehold.RequestID(reqID),
			leasehold.OnError(func(err error) { storeErr = err; stop() }))
		stop()
		if err == nil || storeErr == nil || actx.Err() != nil {
			return l, err
		}
		p.w.Logf("%s acquire %s: %v (again in %s)", p.owner, key, storeErr, cfg.ErrorPause)
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
