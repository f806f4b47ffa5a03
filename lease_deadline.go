package leasehold

import "time"

// Remaining returns the time left until the lease's local deadline (the
// earlier of its own and its session's, see Deadline) on the earlier of the
// client's two clocks: the monotonic one, which stands still while the
// machine is suspended, and the boot-time one, which does not. It is zero
// or negative once either deadline has passed, and it grows only when a
// renewal (or a keepalive of the session) is confirmed.
//
// Remaining only reads the clocks: it does not look at Done or Err, so a
// lease that was refused a renewal or released may still report time left.
// Use Held to ask whether the lease is held.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	d, b := l.deadlinesLocked()
	l.mu.Unlock()
	k := l.c.clock
	return min(d.Sub(k.Now()), b-k.Boot())
}
