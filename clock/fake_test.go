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
