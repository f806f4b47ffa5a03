package clock

import "time"

// Waller is implemented by clocks whose wall-clock reading can differ from
// their monotonic one (Skewed, whose wall clock can be stepped on its own).
type Waller interface {
	// Wall returns the wall-clock time, without a monotonic reading.
	Wall() time.Time
}

// Wall returns k's wall-clock reading: k.Wall() if k is a Waller, else
// k.Now() without its monotonic reading (for the real clock, the system's
// wall clock).
//
// leasehold never judges expiry by it: wall clocks are stepped by NTP and
// by hand. It exists for display and for the deliberate wall-clock bug of
// the mutation suite (internal/mutation), which a suite catches by stepping
// a Skewed clock's wall reading.
func Wall(k Clock) time.Time {
	if w, ok := k.(Waller); ok {
		return w.Wall()
	}
	return k.Now().Round(0)
}
