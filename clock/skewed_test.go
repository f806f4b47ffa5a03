package clock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/clock"
)

// scaled is d times rate, as the clock computes it.
func scaled(d time.Duration, rate float64) time.Duration { return time.Duration(float64(d) * rate) }

// The readings advance by the real time elapsed times the rate: each is
// bracketed by real readings taken around it, so the test holds however
// slow the machine.
func TestSkewedRate(t *testing.T) {
	for _, skew := range []float64{-0.05, -0.01, 0, 0.01, 0.05, 1} {
		rate := 1 + skew
		k := clock.NewSkewed(skew)
		reads := map[string]func() time.Duration{
			"now":  func() time.Duration { return time.Duration(k.Now().UnixNano()) },
			"boot": k.Boot,
			"wall": func() time.Duration { return time.Duration(k.Wall().UnixNano()) },
		}
		for name, read := range reads {
			a := time.Now()
			v0 := read()
			b := time.Now()
			time.Sleep(10 * time.Millisecond)
			c := time.Now()
			v1 := read()
			d := time.Now()
			lo, hi := scaled(c.Sub(b), rate), scaled(d.Sub(a), rate)
			if el := v1 - v0; el < lo-time.Microsecond || el > hi+time.Microsecond {
				t.Errorf("skew %v: %s advanced %s, want within [%s, %s]", skew, name, el, lo, hi)
			}
		}
		if w := k.Wall(); strings.Contains(w.String(), "m=") {
			t.Errorf("Wall carries a monotonic reading")
		}
	}
}

func TestSkewedJumps(t *testing.T) {
	k := clock.NewSkewed(0)
	n0, b0, w0 := k.Now(), k.Boot(), k.Wall()
	k.Jump(-288 * time.Second)
	if d := k.Now().Sub(n0); d > -287*time.Second {
		t.Fatalf("after Jump(-288s) Now moved %s", d)
	}
	if d := k.Boot() - b0; d < 0 || d > time.Second {
		t.Fatalf("Jump moved Boot by %s", d)
	}
	if d := k.Wall().Sub(w0); d < 0 || d > time.Second {
		t.Fatalf("Jump moved Wall by %s", d)
	}
	k.JumpWall(time.Hour)
	if d := k.Wall().Sub(w0); d < time.Hour {
		t.Fatalf("after JumpWall(1h) Wall moved %s", d)
	}
	if d := k.Now().Sub(n0); d > -287*time.Second {
		t.Fatalf("JumpWall moved Now to %s", d)
	}
	if got := clock.Wall(k); got.Sub(w0) < time.Hour {
		t.Fatalf("clock.Wall does not use the clock's own wall reading")
	}
	if got, now := clock.Wall(clock.Real()), time.Now(); got.Sub(now) > time.Second || now.Sub(got) > time.Second || strings.Contains(got.String(), "m=") {
		t.Fatalf("clock.Wall(Real) = %v at %v", got, now)
	}
}

// A jump does not move timers: a timer set before a forward jump still
// waits for its duration of elapsed time.
func TestSkewedTimerIgnoresJumps(t *testing.T) {
	k := clock.NewSkewed(0)
	start := time.Now()
	tm := k.NewTimer(30 * time.Millisecond)
	k.Jump(time.Hour)
	<-tm.C()
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("fired after %s of real time", el)
	}
}

// A timer at rate r fires no earlier than d/r of real time.
func TestSkewedTimerRate(t *testing.T) {
	k := clock.NewSkewed(1) // twice as fast
	start := time.Now()
	tm := k.NewTimer(60 * time.Millisecond)
	<-tm.C()
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Fatalf("fired after %s of real time, want at least 30ms", el)
	}
	if k.NewTimer(0).Stop() {
		t.Fatal("a timer of 0 did not fire at once")
	}
	tm = k.NewTimer(time.Hour)
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop of a pending timer")
	}
}

// A suspend stops Now and the timers; Boot and Wall go on.
func TestSkewedSuspend(t *testing.T) {
	k := clock.NewSkewed(0)
	k.Suspend()
	tm := k.NewTimer(5 * time.Millisecond)
	if !k.Suspended() {
		t.Fatal("not suspended")
	}
	n0, b0, w0 := k.Now(), k.Boot(), k.Wall()
	time.Sleep(30 * time.Millisecond)
	if !k.Now().Equal(n0) {
		t.Fatalf("Now moved %s while suspended", k.Now().Sub(n0))
	}
	if d := k.Boot() - b0; d < 30*time.Millisecond {
		t.Fatalf("Boot moved %s over a 30ms suspend", d)
	}
	if d := k.Wall().Sub(w0); d < 30*time.Millisecond {
		t.Fatalf("Wall moved %s over a 30ms suspend", d)
	}
	select {
	case <-tm.C():
		t.Fatal("timer fired while suspended")
	default:
	}
	k.Resume()
	select {
	case <-tm.C():
	case <-time.After(30 * time.Second):
		t.Fatal("timer did not fire after Resume")
	}
	if d := k.Now().Sub(n0); d < 0 || d > time.Second {
		t.Fatalf("Now moved %s across Resume", d)
	}
}
