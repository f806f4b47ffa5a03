package storekit_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/storekit"
)

// TestAfterEnd: quick clean-up is done when AfterEnd returns; clean-up on
// a hung backend holds the caller up for CleanupWait only, and goes on
// with a context of its own (not the caller's, which has ended) until its
// limit.
func TestAfterEnd(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	done := false
	storekit.AfterEnd(ended, time.Second, func(ctx context.Context) {
		if ctx.Err() != nil {
			t.Error("the clean-up's context had ended with the caller's")
		}
		done = true
	})
	if !done {
		t.Error("a quick clean-up was not done when AfterEnd returned")
	}
	hung := make(chan time.Duration, 1)
	start := time.Now()
	storekit.AfterEnd(ended, 300*time.Millisecond, func(ctx context.Context) {
		<-ctx.Done() // a backend that never answers
		hung <- time.Since(start)
	})
	if d := time.Since(start); d < storekit.CleanupWait || d > storekit.CleanupWait+5*time.Second {
		t.Errorf("AfterEnd with a hung clean-up returned after %s, want about %s", d, storekit.CleanupWait)
	}
	if d := <-hung; d < 300*time.Millisecond {
		t.Errorf("the hung clean-up's context ended after %s, before its limit", d)
	}
}
