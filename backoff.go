package leasehold

import (
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with full jitter: each wait is drawn
// uniformly from [cur/2, cur] and cur doubles up to max.
type backoff struct {
	cur, min, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{cur: min, min: min, max: max} }

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}
