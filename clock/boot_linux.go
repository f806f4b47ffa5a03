//go:build linux

package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootTime reads CLOCK_BOOTTIME, which keeps counting while suspended.
func bootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}

// BootTime returns the time since boot, including suspend (CLOCK_BOOTTIME).
func BootTime() time.Duration { return bootTime() }
