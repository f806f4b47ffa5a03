package clock

import (
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

// WaitForTimers blocks until at least n timers are waiting. Tests use it to
// know that a goroutine has gone to sleep before they move time.
func (f *Fake) WaitForTimers(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.timers) < n {
		f.cond.Wait()
	}
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
