package clock_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
)

func TestFakeTimersFireInOrderOnAdvance(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	a, b := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-a.C():
		t.Fatal("fired early")
	case <-b.C():
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Millisecond)
	<-b.C()
	if a.Stop() != true || f.Timers() != 0 {
		t.Fatalf("Stop of a pending timer, %d timers left", f.Timers())
	}
	f.Advance(time.Hour)
	select {
	case <-a.C():
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestFakeSuspendMovesOnlyBootTime(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	n0, b0 := f.Now(), f.Boot()
	tm := f.NewTimer(time.Second)
	f.Suspend(time.Minute)
	if !f.Now().Equal(n0) || f.Boot()-b0 != time.Minute {
		t.Fatalf("after Suspend: now moved %s, boot moved %s", f.Now().Sub(n0), f.Boot()-b0)
	}
	select {
	case <-tm.C():
		t.Fatal("timer fired during suspend")
	default:
	}
}

func TestRealBootClockAdvances(t *testing.T) {
	c := clock.Real()
	b0 := c.Boot()
	time.Sleep(10 * time.Millisecond)
	if d := c.Boot() - b0; d < 10*time.Millisecond {
		t.Fatalf("boot clock advanced %s over a 10ms sleep", d)
	}
}

// TestFakeWaitForTimersBounded: WaitForTimers for a timer nobody sets
// panics past its limit, naming what it waited for (it waited for ever,
// and the test with it); WaitForTimersWithin returns that as an error, and
// nil once the timers are there.
func TestFakeWaitForTimersBounded(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	defer clock.SetWaitForTimersLimit(100 * time.Millisecond)()
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		f.WaitForTimers(1)
	}()
	select {
	case p := <-panicked:
		err, ok := p.(error)
		if !ok || err.Error() != "clock: 0 timers waiting after 100ms, want at least 1" {
			t.Errorf("WaitForTimers(1) without a timer panicked with %v, want an error naming 0 of 1", p)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("WaitForTimers(1) without a timer still waits 60s after it began (limit 100ms)")
	}

	if err := f.WaitForTimersWithin(2, 50*time.Millisecond); err == nil {
		t.Error("WaitForTimersWithin(2) without timers: nil, want an error")
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		f.NewTimer(time.Second)
		f.NewTimer(time.Second)
	}()
	if err := f.WaitForTimersWithin(2, time.Minute); err != nil {
		t.Errorf("WaitForTimersWithin(2) as two timers are set: %v", err)
	}
}
