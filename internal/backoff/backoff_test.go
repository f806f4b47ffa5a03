package backoff

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestEqualJitterBounds(t *testing.T) {
	b := New(4*time.Millisecond, 20*time.Millisecond)
	bounds := []time.Duration{4, 8, 16, 20, 20}
	for round := 0; round < 200; round++ {
		b.Reset()
		for _, ms := range bounds {
			bound := ms * time.Millisecond
			if d := b.Next(); d < bound/2 || d > bound {
				t.Fatalf("wait %s outside [%s, %s]", d, bound/2, bound)
			}
		}
	}
}

func TestFullJitterBounds(t *testing.T) {
	b := NewFull(time.Millisecond, 3*time.Millisecond)
	bounds := []time.Duration{1, 2, 3, 3}
	for round := 0; round < 200; round++ {
		b.Reset()
		for _, ms := range bounds {
			bound := ms * time.Millisecond
			if d := b.Next(); d <= 0 || d > bound {
				t.Fatalf("wait %s outside (0, %s]", d, bound)
			}
		}
	}
}

func TestZeroMinimumIsUsable(t *testing.T) {
	for _, b := range []*Backoff{New(0, 0), NewFull(0, 0)} {
		if d := b.Next(); d < 0 || d > 1 {
			t.Fatalf("wait %s, want at most 1ns", d)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
}

// A maximum near the largest Duration must not overflow the doubling (the
// bound went negative and rand.Int64N panicked).
func TestHugeMaximum(t *testing.T) {
	for _, b := range []*Backoff{New(time.Second, math.MaxInt64), NewFull(time.Second, math.MaxInt64)} {
		for i := 0; i < 80; i++ {
			if d := b.Next(); d <= 0 {
				t.Fatalf("round %d: wait %s", i, d)
			}
		}
	}
}
