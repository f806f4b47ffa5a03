package server

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/testrig/servertest"
)

// A place kept between polls has a grace timer; when the next poll takes
// the place back, that timer stops at once. It was stopped later, by the
// grace's goroutine once it ran: until then a test counting its fake
// clock's timers took the stale grace timer for the new poll's and moved
// the clock before the poll's own timer existed, and the poll waited
// forever (CI run 85 hung in TestEngineParkLimits on the timer's late
// start, fixed in f05a8ca; a reading of the other park tests then found
// TestProxyShortPollWaitsOnPark open to the late stop). The tests make
// the server's Stop of a grace timer late (as a goroutine that runs late
// on a loaded machine is), and look at the timer itself once the place is
// back.

// timerLog is a clock that keeps the timers it makes, by duration; the
// server's Stop of a timer of duration slow takes 50 ms (real time) before
// it stops the timer.
type timerLog struct {
	clock.Clock
	slow   time.Duration
	mu     sync.Mutex
	timers map[time.Duration][]clock.Timer // the timers themselves, not the server's handles
}

func (c *timerLog) NewTimer(d time.Duration) clock.Timer {
	t := c.Clock.NewTimer(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers == nil {
		c.timers = map[time.Duration][]clock.Timer{}
	}
	c.timers[d] = append(c.timers[d], t)
	if d == c.slow {
		return lateStop{t}
	}
	return t
}

// lateStop is a timer whose Stop comes 50 ms late.
type lateStop struct{ clock.Timer }

func (t lateStop) Stop() bool {
	time.Sleep(50 * time.Millisecond)
	return t.Timer.Stop()
}

// only waits for the one timer of d made so far and returns it.
func (c *timerLog) only(t *testing.T, d time.Duration) clock.Timer {
	t.Helper()
	var got []clock.Timer
	servertest.WaitFor(t, "a timer of "+d.String(), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		got = c.timers[d]
		return len(got) > 0
	})
	if len(got) != 1 {
		t.Fatalf("%d timers of %v; want 1", len(got), d)
	}
	return got[0]
}

// staleGraceTries runs try five times, each reporting whether the grace
// timer of the place it took back was still running, and fails the test
// if one was.
func staleGraceTries(t *testing.T, try func(i int) (stale bool)) {
	t.Helper()
	const tries = 5
	stale := 0
	for i := range tries {
		if try(i) {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d tries: the grace timer still ran once its place was taken back", stale, tries)
	}
}

// enginePollRunsOut makes a 2-second poll by "w" (request id w-1) on
// "job", held by another, and runs it out on fc: it answers held, and its
// place is kept.
func enginePollRunsOut(t *testing.T, e *Engine, fc *clock.Fake) {
	t.Helper()
	w := poll(e, parkReq("w", "w-1", 2*time.Second))
	fc.WaitForTimers(1)
	fc.Advance(2 * time.Second)
	if a := <-w; !errors.Is(a.err, leasehold.ErrHeld) {
		t.Fatalf("the poll that ran out: %v; want held", a.err)
	}
}

func TestEngineParkGraceStopsWhenTakenBack(t *testing.T) {
	staleGraceTries(t, func(i int) (stale bool) {
		fc := clock.NewFake(time.Unix(1_700_000_000, 0))
		tl := &timerLog{Clock: fc, slow: ParkGrace}
		e, err := OpenEngine(EngineConfig{Clock: tl})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		stopExpiryLoop(e)
		pxAcquire(t, e, parkReq("holder", "h", 0))
		enginePollRunsOut(t, e, fc)
		grace := tl.only(t, ParkGrace)
		again := poll(e, parkReq("w", "w-1", 3*time.Second))
		servertest.WaitFor(t, "the place taken back", func() bool {
			e.lock()
			defer e.unlock()
			return len(e.parked) == 0
		})
		stale = grace.Stop() // still running: stopped here so that the count below is right
		fc.WaitForTimers(1)  // again's
		fc.Advance(3 * time.Second)
		if a := <-again; !errors.Is(a.err, leasehold.ErrHeld) {
			t.Fatalf("try %d, the poll that took the place back: %v; want held", i, a.err)
		}
		return stale
	})
}

func TestProxyParkGraceStopsWhenTakenBack(t *testing.T) {
	staleGraceTries(t, func(i int) (stale bool) {
		fc := clock.NewFake(time.Unix(1_000_000, 0))
		tl := &timerLog{Clock: fc, slow: ParkGrace}
		p := pxNew(t, memory.New(memory.WithClock(fc)), ProxyConfig{Clock: tl})
		defer p.Close()
		pxAcquire(t, p, proxyParkReq("holder", "h", 0))
		proxyPollRunsOut(t, p, fc, "w", "w-1")
		grace := tl.only(t, ParkGrace)
		short := poll(p, proxyParkReq("w", "w-1", 5*time.Millisecond))
		servertest.WaitFor(t, "the place taken back", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, pk := range p.parks {
				if pk.polls == 0 {
					return false
				}
			}
			return len(p.parks) == 1
		})
		stale = grace.Stop()
		proxyPolling(t, p, fc, 3) // the park's wait and retry timer, and the short poll's
		fc.Advance(5 * time.Millisecond)
		if a := <-short; !errors.Is(a.err, leasehold.ErrHeld) {
			t.Fatalf("try %d, the short poll: %v; want held", i, a.err)
		}
		return stale
	})
}
