// Package clock is the time source of leasehold: a real clock for production
// and a fake one that tests move by hand.
//
// A Clock gives two readings. Now is the usual monotonic reading (it stops
// while the machine is suspended, see golang/go#24595). Boot is the time
// since the machine booted, which keeps running during suspend
// (CLOCK_BOOTTIME on Linux). A lease holder honours whichever deadline passes
// first, so a suspended holder never believes it still holds a lease.
package clock

import "time"

// Clock is the time source injected into leasehold's clients and stores.
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time with a monotonic reading.
	Now() time.Time
	// Boot returns the time elapsed since boot, including time spent
	// suspended. It only needs to be comparable with itself.
	Boot() time.Duration
	// NewTimer returns a timer that fires once after d (as measured by Now).
	NewTimer(d time.Duration) Timer
}

// Timer is the subset of *time.Timer that leasehold uses.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) Boot() time.Duration            { return bootTime() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
