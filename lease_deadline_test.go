package leasehold_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/memory"
)

// Remaining counts down on the earlier of both clocks: a suspend (the boot
// clock moves, the monotonic one does not) shortens it although Deadline,
// a monotonic time, stays where it was.
func TestLeaseRemainingAfterSuspend(t *testing.T) {
	fk := clock.NewFake(time.Unix(1_000_000, 0))
	c, err := leasehold.New(memory.New(), leasehold.WithClock(fk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(context.Background(), "r", leasehold.TTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	const life = 2965 * time.Millisecond // TTL*0.99 - 5ms
	if got := l.Remaining(); got != life {
		t.Errorf("Remaining %s on a fresh lease, want %s", got, life)
	}
	fk.Suspend(time.Second)
	if got, mono := l.Remaining(), l.Deadline().Sub(fk.Now()); got != life-time.Second || mono != life {
		t.Errorf("after a 1s suspend: Remaining %s (want %s), monotonic time left %s (want %s)", got, life-time.Second, mono, life)
	}
	fk.Suspend(2 * time.Second)
	if got := l.Remaining(); got != life-3*time.Second {
		t.Errorf("after a 3s suspend: Remaining %s, want %s", got, life-3*time.Second)
	}
	if l.Held() {
		t.Error("Held after a suspend past the deadline")
	}
}
