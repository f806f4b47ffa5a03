package cli

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	vis "github.com/leasehold/leasehold/internal/visible"
	"github.com/leasehold/leasehold/redis"
)

// visible shows an identifier (a lease name, an owner) in a terminal as
// the dashboard does (internal/visible).
func visible(s string) string { return vis.String(s) }

// shortDuration rounds d for display: to the millisecond under a second
// (short TTLs: 17ms, not 16.666666ms), to 100ms under a minute, else to
// the second.
func shortDuration(d time.Duration) time.Duration {
	if d < time.Second && d > -time.Second {
		return d.Round(time.Millisecond)
	}
	return roundDuration(d)
}

// holdback describes the hold-back of a Redis store that restarted (h's
// owner is redis.HoldbackOwner, or redis.FailoverHoldbackOwner after a
// promotion), or returns "" for a real holder.
func holdback(h *leasehold.HeldError, remaining time.Duration) string {
	if !redis.IsHoldback(h.Owner) {
		return ""
	}
	if h.Owner == redis.FailoverHoldbackOwner {
		return fmt.Sprintf("Redis primary changed (failover) recently, and no lease is granted for %s more: the new primary may lack a lease the old one granted while its holder still runs, so grants wait until any such lease would have expired (the URL's holdback= sets how long)",
			max(remaining, 0).Round(time.Second))
	}
	return fmt.Sprintf("Redis restarted recently, and no lease is granted for %s more: a lease granted before the restart may have been lost by Redis while its holder still runs, so grants wait until any such lease would have expired (the URL's holdback= sets how long)",
		max(remaining, 0).Round(time.Second))
}
