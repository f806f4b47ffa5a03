package cli

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
	vis "github.com/leasehold/leasehold/internal/visible"
	"github.com/leasehold/leasehold/postgres"
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

// holdback describes a store's hold-back (h's owner is redis.HoldbackOwner
// after a restart of Redis, redis.FailoverHoldbackOwner after a
// promotion, redis.ReplicationHoldbackOwner after a new replication id,
// redis.LostHoldbackOwner when the marker was missing, postgres.HoldbackOwner after PostgreSQL's timeline changed),
// or returns "" for a real holder.
func holdback(h *leasehold.HeldError, remaining time.Duration) string {
	var what, why string
	switch h.Owner {
	case redis.HoldbackOwner:
		what, why = "Redis restarted", "a lease granted before the restart may have been lost by Redis while its holder still runs"
	case redis.FailoverHoldbackOwner:
		what, why = "Redis primary changed (failover)", "the new primary may lack a lease the old one granted while its holder still runs"
	case redis.ReplicationHoldbackOwner:
		what, why = "Redis's replication changed (a new replication id: a replica attached or was detached)", "its data may have come from or gone to another node, which may lack a lease granted while its holder still runs"
	case redis.LostHoldbackOwner:
		what, why = "Redis came up without the store's marker (a first use, or its data set was lost)", "a lease granted before may have been lost with the data while its holder still runs"
	case postgres.HoldbackOwner:
		what, why = "PostgreSQL's timeline changed (a replica was promoted)", "the promoted server may lack a lease the old primary granted while its holder still runs"
	default:
		return ""
	}
	return fmt.Sprintf("%s recently, and no lease is granted for %s more: %s, so grants wait until any such lease would have expired (the URL's holdback= sets how long)",
		what, holdbackLeft(remaining), why)
}

// holdbackLeft shows a hold-back's time left: to the second, and under a
// second rounded up to the next 100ms ("0.3s"), never "0s" (a status line
// said "no lease is granted for 0s more"); none left (the store's answer
// is older than the end) is "less than a second".
func holdbackLeft(d time.Duration) string {
	const step = 100 * time.Millisecond
	switch {
	case d <= 0:
		return "less than a second"
	case d < time.Second:
		if up := (d + step - 1) / step * step; up < time.Second {
			return fmt.Sprintf("%.1fs", up.Seconds())
		}
		return "1s"
	}
	return d.Round(time.Second).String()
}
