//go:build unix

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// The deadline passed to the keeper is measured from a reading of the
// host's clocks taken before the time left is asked for: a delay between
// the two (here 100ms) makes it earlier, never later.
func TestSetRemainingOfReadsClocksFirst(t *testing.T) {
	tr := &tree{dl: make(chan hostTime, 1)}
	var asked hostTime
	tr.setRemainingOf(func() time.Duration {
		asked = hostNow()
		time.Sleep(100 * time.Millisecond)
		return time.Second
	})
	got := <-tr.dl
	if got.mono > asked.mono+time.Second || got.boot > asked.boot+time.Second {
		t.Errorf("deadline %v is later than the time left from when it was asked for (%v + 1s)", got, asked)
	}
}

// orderTree records how the watchdog passes deadlines on.
type orderTree struct {
	fakeTree
	w        *watchdog
	of       []time.Duration
	sentSeen []time.Time // w.sentDeadline when the time left was read
}

func (o *orderTree) setRemainingOf(remaining func() time.Duration) {
	o.sentSeen = append(o.sentSeen, o.w.sentDeadline)
	o.of = append(o.of, remaining())
}

// The watchdog sends the first deadline (the keeper waits for it) and every
// moved one through setRemainingOf, recording the deadline before it reads
// the time left, so that a renewal in between is passed on at the next tick.
func TestWatchdogDeadlineOrder(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	l := fakeLease(t, fk, 3*time.Second)
	tr := &orderTree{}
	w := &watchdog{lease: l, grace: time.Second, tree: tr, stderr: io.Discard, name: "w"}
	tr.w = w
	w.passDeadline()
	w.tick()
	if len(tr.of) != 1 || len(tr.remaining) != 0 {
		t.Fatalf("first deadline: setRemainingOf %v, setRemaining %v; want one setRemainingOf", tr.of, tr.remaining)
	}
	if !tr.sentSeen[0].Equal(l.Deadline()) {
		t.Errorf("sentDeadline %v when the time left was read, want %v", tr.sentSeen[0], l.Deadline())
	}
	fk.Advance(500 * time.Millisecond)
	if err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.tick()
	if len(tr.of) != 2 || tr.of[1] != 2965*time.Millisecond || len(tr.remaining) != 0 {
		t.Errorf("after a renewal: setRemainingOf %v, setRemaining %v; want a second 2.965s", tr.of, tr.remaining)
	}
}

// A renewal refused by the store: the keeper is given a deadline a grace
// after the planned SIGKILL (2·grace from now, the lease's deadline being
// 10s away), and no later one afterwards.
func TestWatchdogRefusalShortensKeeperDeadline(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	st := memory.New()
	c, err := leasehold.New(st, leasehold.WithClock(fk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryAcquire(ctx, "w", leasehold.TTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, "w", l.Owner(), l.Token()); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, leasehold.ErrLost) {
		t.Fatalf("renew after the store freed it: %v, want ErrLost", err)
	}
	tr := &fakeTree{}
	w := &watchdog{lease: l, grace: time.Second, tree: tr, stderr: io.Discard, name: "w"}
	w.sentDeadline = l.Deadline()
	w.onDone(l.Remaining())
	if want := []os.Signal{sigTERM}; !slices.Equal(tr.sigs, want) {
		t.Errorf("signals %v, want %v", tr.sigs, want)
	}
	if want := []time.Duration{2 * time.Second}; !slices.Equal(tr.remaining, want) {
		t.Errorf("keeper given %v after the refusal, want %v (a grace after the planned SIGKILL)", tr.remaining, want)
	}
	w.sentDeadline = time.Time{} // as if the deadline moved
	w.tick()
	if len(tr.remaining) != 1 {
		t.Errorf("keeper given a later deadline after the refusal: %v", tr.remaining)
	}
}
