package clock

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Fake is a Clock that only moves when told to. Its zero value is not usable;
// call NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	boot   time.Duration
	timers []*fakeTimer
	cond   *sync.Cond
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	f := &Fake{now: start, boot: time.Hour}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Boot returns the fake time since boot.
func (f *Fake) Boot() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.boot
}

// NewTimer returns a timer that fires when the clock has been advanced by d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.cond.Broadcast()
	return t
}

// Advance moves both readings forward by d and fires every timer that is due,
// in deadline order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.boot += d
	due := f.takeDue()
	f.mu.Unlock()
	for _, t := range due {
		select {
		case t.c <- t.at:
		default:
		}
	}
}

// Suspend simulates a machine suspended for d: the boot-time reading moves,
// the monotonic one (and so every timer) does not, as on Linux.
func (f *Fake) Suspend(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boot += d
}

// Timers returns how many timers are waiting to fire.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// waitForTimersLimit bounds WaitForTimers (a variable for the tests).
var waitForTimersLimit = 2 * time.Minute

// WaitForTimers blocks until at least n timers are waiting. Tests use it to
// know that a goroutine has gone to sleep before they move time.
//
// It panics, naming n and how many timers wait, if they are not there
// within 2 minutes: a goroutine that never sleeps on the clock (it took
// another path, or its timer fired or was stopped before the call) would
// otherwise hold the test until the test binary's timeout, with no word
// of what it waited for. Use WaitForTimersWithin to choose the limit and
// handle the failure.
func (f *Fake) WaitForTimers(n int) {
	if err := f.WaitForTimersWithin(n, waitForTimersLimit); err != nil {
		panic(err)
	}
}

// WaitForTimersWithin blocks until at least n timers are waiting, or d
// (real time) has passed; then it returns an error naming n and how many
// timers wait.
func (f *Fake) WaitForTimersWithin(n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	// Wakes the wait below at the deadline (after it, on the real clock).
	wake := time.AfterFunc(d, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.cond.Broadcast()
	})
	defer wake.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.timers) < n {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("clock: %d timers waiting after %s, want at least %d", len(f.timers), d, n)
		}
		f.cond.Wait()
	}
	return nil
}

func (f *Fake) takeDue() []*fakeTimer {
	var due, keep []*fakeTimer
	for _, t := range f.timers {
		if !t.at.After(f.now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	f.timers = keep
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	return due
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, o := range t.f.timers {
		if o == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}
