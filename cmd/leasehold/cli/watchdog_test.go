package cli

import (
	"context"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// fakeTree records what the watchdog does to the command's group.
type fakeTree struct {
	sigs      []os.Signal
	remaining []time.Duration
}

func (f *fakeTree) signal(sig os.Signal)         { f.sigs = append(f.sigs, sig) }
func (f *fakeTree) setRemaining(d time.Duration) { f.remaining = append(f.remaining, d) }

// fakeLease takes a lease with ttl on a client whose clock is fk.
func fakeLease(t *testing.T, fk *clock.Fake, ttl time.Duration) *leasehold.Lease {
	t.Helper()
	c, err := leasehold.New(memory.New(), leasehold.WithClock(fk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), "w", leasehold.TTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l
}

// A machine suspended past the lease's deadline: the monotonic clock stood
// still, the boot-time clock did not. The watchdog's next tick after the
// resume must kill the group, as Lease.Held would say it is lost.
func TestWatchdogBootDeadline(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	l := fakeLease(t, fk, 3*time.Second)
	tree := &fakeTree{}
	w := &watchdog{lease: l, grace: time.Second, tree: tree, stderr: io.Discard, name: "w"}

	w.tick()
	if len(tree.sigs) != 0 {
		t.Fatalf("signals %v while the lease is fresh", tree.sigs)
	}
	fk.Suspend(3 * time.Second) // TTL*0.99 - 5ms = 2.965s had been left
	if l.Held() {
		t.Fatal("the lease is held after a suspend past its deadline")
	}
	w.tick()
	if want := []os.Signal{sigTERM, os.Kill}; !slices.Equal(tree.sigs, want) {
		t.Errorf("signals %v after the suspend, want %v", tree.sigs, want)
	}
	if w.lost == nil {
		t.Error("the watchdog does not report the lease lost")
	}
}

// A suspend that leaves less than the grace window on the boot-time clock
// starts the grace window (SIGTERM) at the next tick, not only when the
// monotonic clock gets there.
func TestWatchdogBootGrace(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	l := fakeLease(t, fk, 3*time.Second)
	tree := &fakeTree{}
	w := &watchdog{lease: l, grace: time.Second, tree: tree, stderr: io.Discard, name: "w"}
	fk.Suspend(2500 * time.Millisecond) // 465ms left on the boot-time clock
	w.tick()
	if want := []os.Signal{sigTERM}; !slices.Equal(tree.sigs, want) {
		t.Errorf("signals %v, want %v", tree.sigs, want)
	}
	// The kill comes once the boot-time deadline has passed too.
	fk.Suspend(500 * time.Millisecond)
	w.tick()
	if want := []os.Signal{sigTERM, os.Kill}; !slices.Equal(tree.sigs, want) {
		t.Errorf("signals %v, want %v", tree.sigs, want)
	}
}

// The keeper is given the lease's time left at each tick where the
// deadline moved (a renewal), and only then.
func TestWatchdogPassesDeadline(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	l := fakeLease(t, fk, 3*time.Second)
	tree := &fakeTree{}
	w := &watchdog{lease: l, grace: time.Second, tree: tree, stderr: io.Discard, name: "w"}
	w.sentDeadline = l.Deadline()
	w.tick()
	if len(tree.remaining) != 0 {
		t.Fatalf("deadline passed on without a renewal: %v", tree.remaining)
	}
	fk.Advance(500 * time.Millisecond) // before any timer of the keepalive is due
	if err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.tick()
	w.tick()
	if len(tree.remaining) != 1 || tree.remaining[0] != 2965*time.Millisecond {
		t.Errorf("passed on %v, want one 2.965s after the renewal", tree.remaining)
	}
}

// The group is killed killMargin before the lease's local deadline, by the
// watchdog and by the keeper (which is passed the time left less the
// margin), so that a kill delayed by a starved scheduler still lands
// before the store's expiry. Before the margin the kill came only at the
// deadline itself, and R13's control saw a 30 ms overlap at load 16.
func TestWatchdogKillMargin(t *testing.T) {
	const ttl = 2 * time.Second
	m := killMargin(ttl)
	if m != 100*time.Millisecond || killMargin(time.Second) != 50*time.Millisecond {
		t.Fatalf("killMargin(2s) = %s, killMargin(1s) = %s; want 100ms and 50ms", m, killMargin(time.Second))
	}
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	l := fakeLease(t, fk, ttl)
	tree := &fakeTree{}
	w := &watchdog{lease: l, grace: 500 * time.Millisecond, margin: m, tree: tree, stderr: io.Discard, name: "w"}
	w.tick() // passes the first deadline on
	if want := l.Remaining() - m; len(tree.remaining) != 1 || tree.remaining[0] != want {
		t.Errorf("the keeper was passed %v, want [%s] (time left less the margin)", tree.remaining, want)
	}
	// 1.98s - 5ms = 1.975s left at first: stop the keepalive from renewing
	// by moving the clock only through check's view of time left.
	w.check(m + time.Millisecond)
	if want := []os.Signal{sigTERM}; !slices.Equal(tree.sigs, want) {
		t.Fatalf("signals %v with just over the margin left, want %v", tree.sigs, want)
	}
	w.check(m)
	if want := []os.Signal{sigTERM, os.Kill}; !slices.Equal(tree.sigs, want) {
		t.Errorf("signals %v with the margin left, want %v", tree.sigs, want)
	}
}
