package etcd

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// waitAsW starts owner w's AcquireWait of n (request id r, TTL 10 s, a
// minute at most) on s and returns once n's queue is [w] (failing with
// what after within); the channel gives the wait's outcome (waitFor).
func waitAsW(t *testing.T, ctx context.Context, s *Store, within time.Duration, what string) <-chan waitResult {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancel)
	done := waitFor(wctx, s, leasehold.AcquireRequest{Name: "n", Owner: "w", RequestID: "r", TTL: 10 * time.Second})
	for deadline := time.Now().Add(within); !slices.Equal(queued(t, s, "n"), []string{"w"}); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, queued(t, s, "n"))
		}
	}
	return done
}

// grantedToW fails unless the wait's outcome is a grant to w, and
// returns it.
func grantedToW(t *testing.T, done <-chan waitResult) leasehold.Record {
	t.Helper()
	r := <-done
	if r.err != nil || r.rec.Owner != "w" {
		t.Fatalf("AcquireWait = %+v, %v; want a grant to w", r.rec, r.err)
	}
	return r.rec
}
