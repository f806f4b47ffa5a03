package remote_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
)

// TestObservePollsSeesTheWaitsTry: a Client's wait on a held lease starts
// with a try, and the poll observer is told of it (wait 0, "held") before
// the first long-poll. It was not (CI, 2026-12-05): a server stopped just
// before that try left "leasehold run" silent for the store's whole
// timeout, where it says that the store does not answer.
func TestObservePollsSeesTheWaitsTry(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		s := ts.open(t, map[string]string{"resp": "?wait_chunk=200ms"}[tr.name])
		ctx := ctxT(t)
		if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "ob", Owner: "holder", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		type poll struct {
			wait time.Duration
			err  error
		}
		var mu sync.Mutex
		var polls []poll
		s.(interface{ ObservePolls(remote.PollObserver) }).ObservePolls(func(wait time.Duration) func(error) {
			return func(err error) {
				mu.Lock()
				polls = append(polls, poll{wait, err})
				mu.Unlock()
			}
		})
		c, err := leasehold.New(s, leasehold.WithOwner("waiter"))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		defer cancel()
		if _, err := c.Acquire(wctx, "ob"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire of a held lease: %v; want the deadline", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(polls) < 2 {
			t.Fatalf("observed %v; want the try and at least one long-poll", polls)
		}
		if polls[0].wait != 0 || !errors.Is(polls[0].err, leasehold.ErrHeld) {
			t.Errorf("first request observed: %+v; want the try (wait 0) refused as held", polls[0])
		}
		if polls[1].wait <= 0 {
			t.Errorf("second request observed: %+v; want a long-poll", polls[1])
		}
	})
}
