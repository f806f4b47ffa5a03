package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Skewed is a Clock for fault tests that runs in real time, but wrongly:
// at the real rate times (1+skew), with readings that can be made to jump,
// and with a suspend during which its monotonic reading and its timers
// stand still while its boot-time and wall readings go on, as on a machine
// that was suspended.
//
// Its three readings are independent after a jump: Jump steps only the
// monotonic reading (Now), JumpWall only the wall reading (Wall); Boot never
// jumps. Timers measure elapsed time at the clock's rate: a jump does not
// move them (as Go's own timers ignore a stepped clock), a suspend stops
// them.
//
// It is safe for concurrent use. Create it with NewSkewed.
type Skewed struct {
	mu sync.Mutex
	// The readings at the real instant origin; from there they advance by
	// the real time elapsed times rate (Now and the timers' run time only
	// while not suspended).
	origin    time.Time // real, with a monotonic reading
	rate      float64
	now0      time.Time // with a monotonic reading
	boot0     time.Duration
	wall0     time.Time // without one
	run0      time.Duration
	suspended bool
	changed   chan struct{} // closed and replaced at every change, for timers
}

// NewSkewed returns a clock that starts at the real readings and runs at
// the real rate times (1+skew). skew must be above -1.
func NewSkewed(skew float64) *Skewed {
	if skew <= -1 {
		panic("clock: skew must be above -1")
	}
	r := time.Now()
	return &Skewed{origin: r, rate: 1 + skew, now0: r, boot0: bootTime(), wall0: r.Round(0), changed: make(chan struct{})}
}

func (s *Skewed) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * s.rate)
}

// readingsLocked returns Now, Boot, Wall and the run time at real instant r.
func (s *Skewed) readingsLocked(r time.Time) (now time.Time, boot time.Duration, wall time.Time, run time.Duration) {
	e := s.scaled(r.Sub(s.origin))
	now, run = s.now0, s.run0
	if !s.suspended {
		now, run = now.Add(e), run+e
	}
	return now, s.boot0 + e, s.wall0.Add(e), run
}

// change re-anchors the readings at the present, applies f, and wakes the
// timers so that they re-plan.
func (s *Skewed) change(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := time.Now()
	s.now0, s.boot0, s.wall0, s.run0 = s.readingsLocked(r)
	s.origin = r
	f()
	close(s.changed)
	s.changed = make(chan struct{})
}

// Now returns the monotonic reading (a time with a monotonic reading, so
// that comparisons and Sub between its readings use it).
func (s *Skewed) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now, _, _, _ := s.readingsLocked(time.Now())
	return now
}

// Boot returns the boot-time reading; it keeps running during a suspend.
func (s *Skewed) Boot() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, boot, _, _ := s.readingsLocked(time.Now())
	return boot
}

// Wall returns the wall-clock reading (see Wall and Waller).
func (s *Skewed) Wall() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, wall, _ := s.readingsLocked(time.Now())
	return wall
}

// SetSkew changes the rate from now on to the real rate times (1+skew).
func (s *Skewed) SetSkew(skew float64) {
	if skew <= -1 {
		panic("clock: skew must be above -1")
	}
	s.change(func() { s.rate = 1 + skew })
}

// Jump steps the monotonic reading by d (backward if d < 0). Boot, Wall and
// timers are not moved.
func (s *Skewed) Jump(d time.Duration) { s.change(func() { s.now0 = s.now0.Add(d) }) }

// JumpWall steps the wall reading by d (backward if d < 0).
func (s *Skewed) JumpWall(d time.Duration) { s.change(func() { s.wall0 = s.wall0.Add(d) }) }

// Suspend stops the monotonic reading and the timers until Resume; Boot
// and Wall go on. Suspending a suspended clock does nothing.
func (s *Skewed) Suspend() { s.change(func() { s.suspended = true }) }

// Resume ends a suspend.
func (s *Skewed) Resume() { s.change(func() { s.suspended = false }) }

// Suspended reports whether the clock is suspended.
func (s *Skewed) Suspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended
}

// NewTimer returns a timer that fires once the clock has run for d: after
// d/(1+skew) of real time not spent suspended, whatever jumps happen.
func (s *Skewed) NewTimer(d time.Duration) Timer {
	t := &skewedTimer{c: make(chan time.Time, 1), stop: make(chan struct{})}
	if d <= 0 {
		t.fire(s.Now())
		return t
	}
	s.mu.Lock()
	_, _, _, run := s.readingsLocked(time.Now())
	s.mu.Unlock()
	go t.wait(s, run+d)
	return t
}

type skewedTimer struct {
	c     chan time.Time
	stop  chan struct{}
	state atomic.Int32 // 0 pending, 1 fired, 2 stopped
}

func (t *skewedTimer) C() <-chan time.Time { return t.c }

func (t *skewedTimer) Stop() bool {
	if t.state.CompareAndSwap(0, 2) {
		close(t.stop)
		return true
	}
	return false
}

func (t *skewedTimer) fire(now time.Time) {
	if t.state.CompareAndSwap(0, 1) {
		t.c <- now
	}
}

// wait fires the timer once the clock's run time reaches at.
func (t *skewedTimer) wait(s *Skewed, at time.Duration) {
	for {
		s.mu.Lock()
		now, _, _, run := s.readingsLocked(time.Now())
		suspended, changed, rate := s.suspended, s.changed, s.rate
		s.mu.Unlock()
		if run >= at {
			t.fire(now)
			return
		}
		var wake <-chan time.Time
		var rt *time.Timer
		if !suspended {
			rt = time.NewTimer(time.Duration(float64(at-run)/rate) + 1)
			wake = rt.C
		}
		select {
		case <-t.stop:
		case <-changed:
		case <-wake:
		}
		if rt != nil {
			rt.Stop()
		}
		if t.state.Load() != 0 {
			return
		}
	}
}
