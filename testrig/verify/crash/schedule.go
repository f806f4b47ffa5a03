// Package crash holds suites R3 and R5 of the verification plan: the lock
// workload (acquire → fenced increment on the oracle → release) from worker
// processes while the store's engine, or the lease server, is SIGKILLed and
// restarted (R3) or SIGSTOPped and continued (R5). For the embedded SQLite
// store, R3 kills the worker processes themselves, which hold the database
// file open and may be in the middle of a transaction. The tests are in the
// _test files; this file has the fault schedule they share.
package crash

import (
	"math/rand/v2"
	"time"
)

// Schedule describes periodic faults: the target runs for Every ± Jitter,
// then is down (killed, paused) for a time drawn from [DownMin, DownMax],
// then comes back, and so on.
type Schedule struct {
	Every, Jitter    time.Duration
	DownMin, DownMax time.Duration
}

// KillSchedule is R3's: a SIGKILL every 2 ± 1 s, restarted after 0.5–1 s.
var KillSchedule = Schedule{Every: 2 * time.Second, Jitter: time.Second, DownMin: 500 * time.Millisecond, DownMax: time.Second}

// PauseSchedule is R5's: a SIGSTOP of 1–5 s every 3 s.
var PauseSchedule = Schedule{Every: 3 * time.Second, DownMin: time.Second, DownMax: 5 * time.Second}

// Fault is one fault of a schedule.
type Fault struct {
	Wait time.Duration // running time before it
	Down time.Duration // how long it lasts
}

// Next draws the next fault from rng.
func (s Schedule) Next(rng *rand.Rand) Fault {
	return Fault{Wait: between(rng, s.Every-s.Jitter, s.Every+s.Jitter), Down: between(rng, s.DownMin, s.DownMax)}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return max(lo, 0)
	}
	return max(lo+time.Duration(rng.Int64N(int64(hi-lo)+1)), 0)
}

// Inject runs the schedule until done reports true, which it asks before
// the first fault and after each: it waits, calls down, waits out the fault
// and calls up. It returns the number of faults injected. Every down is
// followed by its up, so the target is running when Inject returns, and it
// returns right after the last fault ended (to measure recovery from it).
// Call it from the test's goroutine: down and up may fail the test.
func Inject(s Schedule, rng *rand.Rand, done func() bool, down, up func()) int {
	n := 0
	for !done() {
		f := s.Next(rng)
		time.Sleep(f.Wait)
		down()
		n++
		time.Sleep(f.Down)
		up()
	}
	return n
}
