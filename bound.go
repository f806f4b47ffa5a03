package leasehold

import "time"

// Bound is something a lease cannot outlive: for a lease taken through a
// session of the leasehold server (package remote), the session, which the
// server ends — freeing every lease attached to it — when it is not kept
// alive, whatever the lease's own TTL.
//
// Implementations must be safe for concurrent use. Once Done is closed it
// stays closed, and a Deadline that has passed never moves later again
// (a keepalive confirmed only after the deadline ends the bound instead).
type Bound interface {
	// Deadline returns the bound's conservative local deadline, as a time of
	// the Client's clock (its monotonic reading) and on the boot-time clock
	// (clock.Clock's Boot). A lease it bounds is not known to be held once
	// either has passed. For a session it is t0 + TTL·(1−ρ) − ε, with t0
	// taken before the keepalive that last confirmed it was sent.
	Deadline() (mono time.Time, boot time.Duration)
	// Done is closed when the bound has ended (the session expired, was
	// refused by the server, or was closed): every lease it bounds is lost
	// at that moment.
	Done() <-chan struct{}
	// Err is nil until Done is closed, then says why it ended.
	Err() error
}

// BoundedStore is implemented by stores whose grants may end before their
// own TTL runs out because something else ends: the session stores of
// package remote. A Lease granted through such a store asks for the grant's
// Bound once, when it is created, and is lost no later than that Bound: its
// Deadline is the earlier of its own and the Bound's, Held turns false and
// Done closes with ErrLost when either passes or when the Bound's Done
// closes. Renewing the lease itself does not extend the Bound.
//
// A Bound's Deadline must be read on the same clock as the Client's
// (leasehold.WithClock); the session stores of package remote take the
// clock as an option and default to the real one, as Client does.
type BoundedStore interface {
	// LeaseBound returns the Bound of the grant rec that this store has just
	// returned from TryAcquire (or Queuer's AcquireWait), or nil if that
	// grant is bounded only by its own TTL.
	LeaseBound(rec Record) Bound
}
