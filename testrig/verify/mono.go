package verify

import (
	"time"

	"golang.org/x/sys/unix"
)

// Mono returns CLOCK_MONOTONIC in nanoseconds: one clock that every process
// on the machine reads alike, so the recorder can order operations of
// different worker processes. (Go's own monotonic reading is relative to
// each process's start.)
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("verify: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// MonoOf converts t, a time of this process with a monotonic reading, to
// the machine-wide Mono clock.
func MonoOf(t time.Time) int64 {
	now, m := time.Now(), Mono()
	return m + int64(t.Sub(now))
}
