package clock

import "time"

// SetWaitForTimersLimit sets WaitForTimers' limit until the returned
// function restores it.
func SetWaitForTimersLimit(d time.Duration) (restore func()) {
	old := waitForTimersLimit
	waitForTimersLimit = d
	return func() { waitForTimersLimit = old }
}
