// Package backoff is the one retry backoff of this module: capped
// exponential backoff with jitter. The bound starts at a minimum and
// doubles after every wait up to a maximum; each wait is drawn at random
// below the bound, so that clients retrying together spread out.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields the waits between retries. It is not safe for concurrent
// use.
type Backoff struct {
	min, max, cur time.Duration
	full          bool
}

// New returns a backoff with "equal jitter": each wait is drawn uniformly
// from [bound/2, bound], so it never falls far below the bound. The bound
// starts at min and doubles up to max (both at least 1ns).
func New(min, max time.Duration) *Backoff { return newBackoff(min, max, false) }

// NewFull returns a backoff with "full jitter": each wait is drawn
// uniformly from (0, bound]. It spreads contending writers the most and
// suits optimistic retries, where the next attempt may well succeed at
// once.
func NewFull(min, max time.Duration) *Backoff { return newBackoff(min, max, true) }

func newBackoff(lo, hi time.Duration, full bool) *Backoff {
	lo = max(lo, 1)
	hi = max(hi, lo)
	return &Backoff{min: lo, max: hi, cur: lo, full: full}
}

// Next returns the next wait and doubles the bound, up to the maximum.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	if b.cur > b.max/2 {
		b.cur = b.max // doubling would pass the maximum (or overflow)
	} else {
		b.cur *= 2
	}
	if b.full {
		return time.Duration(rand.Int64N(int64(d))) + 1
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// Reset sets the bound back to the minimum, after a success.
func (b *Backoff) Reset() { b.cur = b.min }

// Sleep waits for d, or until ctx ends and then returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
