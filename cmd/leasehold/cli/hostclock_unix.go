//go:build unix

package cli

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/clock"
)

// bootClock reads the host's boot-time clock as package clock does
// (CLOCK_BOOTTIME on Linux): one reading shared by every process of the
// host, which keeps counting while the machine is suspended.
func bootClock() time.Duration { return clock.BootTime() }

// monoClock reads CLOCK_MONOTONIC: shared by every process of the host,
// unlike the monotonic readings of time.Now, which count from the start of
// each process.
func monoClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("leasehold: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return time.Duration(ts.Nano())
}
