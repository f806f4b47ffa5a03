//go:build !linux

package clock

import "time"

// bootTime falls back to the wall clock where CLOCK_BOOTTIME does not exist.
// The wall clock keeps running during suspend, which is what the deadline
// check needs, but it can jump; Linux is the supported platform.
func bootTime() time.Duration { return time.Duration(time.Now().UnixNano()) }

// BootTime returns the time since boot where the platform can tell, else the
// wall clock.
func BootTime() time.Duration { return bootTime() }
