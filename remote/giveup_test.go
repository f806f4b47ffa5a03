package remote_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/remote"
	"github.com/leasehold/leasehold/server"
)

// Giving up a wait through the lease server (issue 27's red team, #5): a
// waiter whose poll ran out keeps its place in the server's queue for
// server.ParkGrace; a Go client that gave up there ("leasehold run -w 2"
// after 2 s) left that place behind, and the holder's release granted the
// lease to the waiter that had gone, idle until the grace ended. The
// store now gives the place up (a try with the request id) when its
// caller gives up, and its Close awaits that.

// pollChunk is the waiters' poll in these tests: long enough that the
// server keeps the place of a poll that ran out (at least 1 s).
const pollChunk = 1100 * time.Millisecond

// openWaiter opens a store whose polls last pollChunk.
func openWaiter(t *testing.T, ts *testServer) remoteStore {
	t.Helper()
	s := ts.open(t, map[string]string{"resp": "?wait_chunk=1100ms"}[ts.tr.name])
	remote.SetWaitChunk(s, pollChunk)
	return s
}

// cancelAfterHeldPoll has cancel called when one of s's long-polls ends
// "held" (ran out): the caller gives up right after the server kept its
// place.
func cancelAfterHeldPoll(s remoteStore, cancel func()) {
	var once sync.Once
	s.(interface{ ObservePolls(remote.PollObserver) }).ObservePolls(func(wait time.Duration) func(error) {
		return func(err error) {
			if wait > 0 && errors.Is(err, leasehold.ErrHeld) {
				once.Do(cancel)
			}
		}
	})
}

// grantsTo are the server's grants to owner so far.
func grantsTo(ts *testServer, owner string) int {
	n := 0
	for _, ev := range ts.backend().(interface{ Recent(int) []server.Event }).Recent(1000) {
		if ev.Type == server.EventGranted && ev.Owner == owner {
			n++
		}
	}
	return n
}

// assertGivenUp releases the holder's grant h and checks that the lease
// is then free, with nobody waiting, and was never granted to gone.
func assertGivenUp(t *testing.T, ts *testServer, holder remoteStore, h leasehold.Record, gone string) {
	t.Helper()
	ctx := ctxT(t)
	if n := len(ts.backend().Waiters(h.Name)); n != 0 {
		t.Errorf("%d waiters of %s after the waiter gave up and closed its store; want none", n, h.Name)
	}
	if err := holder.Release(ctx, h.Name, h.Owner, h.Token); err != nil {
		t.Fatal(err)
	}
	if rec, err := holder.Get(ctx, h.Name); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("after the holder's release: %+v, %v; want the lease free (the waiter that gave up is gone)", rec, err)
	}
	if n := grantsTo(ts, gone); n != 0 {
		t.Errorf("%d grants to %q, which had given up; want none", n, gone)
	}
}

// TestAcquireWaitGiveUpKeptPlace: AcquireWait cancelled right after a poll
// ran out, then Close of its store: the place the server kept is given
// up, so the holder's release leaves the lease free. Failed before: the
// release granted it to the waiter that had gone.
func TestAcquireWaitGiveUpKeptPlace(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holder := ts.open(t, "")
		ctx := ctxT(t)
		h, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "gk", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		s := openWaiter(t, ts)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancelAfterHeldPoll(s, cancel)
		if _, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "gk", Owner: "w", TTL: time.Minute}); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait cancelled after a poll ran out: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		assertGivenUp(t, ts, holder, h, "w")
	})
}

// TestClientAcquireGiveUpKeptPlace: as TestAcquireWaitGiveUpKeptPlace,
// through leasehold.Client.Acquire with a deadline ("leasehold run -w"):
// the deadline ends the wait, the store is closed, the holder releases.
// Failed before: the lease was granted to the client that had gone.
func TestClientAcquireGiveUpKeptPlace(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holder := ts.open(t, "")
		ctx := ctxT(t)
		h, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "gc", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		s := openWaiter(t, ts)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cancelAfterHeldPoll(s, cancel)
		c, err := leasehold.New(s, leasehold.WithOwner("cw"))
		if err != nil {
			t.Fatal(err)
		}
		if l, err := c.Acquire(wctx, "gc"); err == nil {
			t.Fatalf("Acquire of a held lease granted %+v", l)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		assertGivenUp(t, ts, holder, h, "cw")
	})
}

// TestAcquireWaitEndedCtxGivesUp: AcquireWait called with an ended ctx and
// the request id of a wait whose place the server keeps (leasehold.Client
// asks so after a failed wait) gives the place up before it returns.
// Failed before: it returned at once, and the release granted the lease
// to the kept place.
func TestAcquireWaitEndedCtxGivesUp(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holder := ts.open(t, "")
		ctx := ctxT(t)
		h, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "ge", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// A wait of req whose poll ran out and whose client then went
		// silent (a lost connection): the server keeps its place.
		req := leasehold.AcquireRequest{Name: "ge", Owner: "w", TTL: time.Minute, RequestID: "ge-wait-1"}
		if _, err := ts.backend().Acquire(ctx, server.AcquireRequest{AcquireRequest: req, Wait: pollChunk}); !errors.Is(err, leasehold.ErrHeld) {
			t.Fatalf("a poll of the held lease: %v; want it to run out", err)
		}
		ts.waiters(t, "ge", 1)
		s := openWaiter(t, ts)
		dead, dcancel := context.WithCancel(ctx)
		dcancel()
		if _, err := s.AcquireWait(dead, req); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait with an ended ctx: %v", err)
		}
		assertGivenUp(t, ts, holder, h, "w")
	})
}

// TestAcquireWaitGiveUpTakesNothing: the give-up (a try with the request
// id) neither takes the lease from its holder nor passes the waiter queued
// in front: the holder keeps it, the earlier waiter keeps its place and
// is granted at the release, and the waiter that gave up never is.
func TestAcquireWaitGiveUpTakesNothing(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holder := ts.open(t, "")
		ctx := ctxT(t)
		h, err := holder.TryAcquire(ctx, leasehold.AcquireRequest{Name: "gn", Owner: "holder", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		first := openWaiter(t, ts)
		type result struct {
			rec leasehold.Record
			err error
		}
		firstGot := make(chan result, 1)
		go func() {
			rec, err := first.AcquireWait(ctx, leasehold.AcquireRequest{Name: "gn", Owner: "first", TTL: time.Minute})
			firstGot <- result{rec, err}
		}()
		ts.waiters(t, "gn", 1)
		s := openWaiter(t, ts)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancelAfterHeldPoll(s, cancel)
		if _, err := s.AcquireWait(wctx, leasehold.AcquireRequest{Name: "gn", Owner: "w", TTL: time.Minute}); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquireWait cancelled after a poll ran out: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if rec, err := holder.Get(ctx, "gn"); err != nil || rec.Owner != "holder" || rec.Token != h.Token {
			t.Fatalf("after the give-up: %+v, %v; want the holder's grant untouched", rec, err)
		}
		ws := ts.backend().Waiters("gn")
		if len(ws) != 1 || ws[0].Owner != "first" {
			t.Fatalf("waiters after the give-up: %+v; want only the first waiter", ws)
		}
		if err := holder.Release(ctx, "gn", "holder", h.Token); err != nil {
			t.Fatal(err)
		}
		got := <-firstGot
		if got.err != nil || got.rec.Owner != "first" {
			t.Fatalf("the first waiter after the release: %+v, %v; want the grant", got.rec, got.err)
		}
		if n := grantsTo(ts, "w"); n != 0 {
			t.Errorf("%d grants to the waiter that gave up; want none", n)
		}
	})
}

// TestAcquirePermitGiveUpKeptPlace: a semaphore's wait cancelled right
// after a poll ran out, then Close of its store: the place the server
// kept is given up, so the holder's release leaves the permit free.
// Failed before: the release granted it to the waiter that had gone.
func TestAcquirePermitGiveUpKeptPlace(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		ts := startEngine(t, tr, server.EngineConfig{}, serveOptions{})
		holder := ts.open(t, "").(leasehold.PermitWaiter)
		ctx := ctxT(t)
		h, err := holder.AcquirePermit(ctx, "gs", 1, leasehold.AcquireRequest{Owner: "holder", TTL: time.Minute}, 0)
		if err != nil {
			t.Fatal(err)
		}
		s := openWaiter(t, ts)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancelAfterHeldPoll(s, cancel)
		if _, err := s.(leasehold.PermitWaiter).AcquirePermit(wctx, "gs", 1, leasehold.AcquireRequest{Owner: "w", TTL: time.Minute}, time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("AcquirePermit cancelled after a poll ran out: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		assertGivenUp(t, ts, holder.(remoteStore), h, "w")
	})
}

// TestGiveUpTakesNoLease (CI run 79): the give-up of a wait whose caller
// has gone never takes the lease. It sent a try with the wait's request
// id, which a loaded server answered a second later, when the lease had
// become free: a grant nobody had asked for, held past the conformance
// suite's bound (TestConformanceProxy/http/Linearizable). Now it is a
// give-up (AcquireRequest.GiveUp), answered only with the request's own
// grant: on a free lease, on another's, and on its owner's other grant it
// grants nothing and changes nothing; its own grant (one that raced with
// the wait's end) it releases.
func TestGiveUpTakesNoLease(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		for _, b := range []struct {
			name  string
			start func(t *testing.T) *testServer
		}{
			{"engine", func(t *testing.T) *testServer {
				return startEngine(t, tr, server.EngineConfig{Dir: t.TempDir()}, serveOptions{})
			}},
			{"proxy", func(t *testing.T) *testServer {
				return startBackend(t, tr, server.NewProxy(memory.New(), server.ProxyConfig{}), serveOptions{})
			}},
		} {
			t.Run(b.name, func(t *testing.T) {
				ts := b.start(t)
				s := ts.open(t, "")
				ctx := ctxT(t)
				gone, cancel := context.WithCancel(ctx)
				cancel()
				// giveUp is a wait of owner with request id id whose
				// caller had gone: AcquireWait with its context ended gives
				// it up before it returns.
				giveUp := func(name, owner, id string) {
					t.Helper()
					_, err := s.(leasehold.Queuer).AcquireWait(gone, leasehold.AcquireRequest{Name: name, Owner: owner, RequestID: id, TTL: time.Minute})
					if !errors.Is(err, context.Canceled) {
						t.Fatalf("AcquireWait with its context ended = %v, want context.Canceled", err)
					}
				}
				unchanged := func(name string, want leasehold.Record) {
					t.Helper()
					got, err := s.Get(ctx, name)
					if err != nil || got.Owner != want.Owner || got.Token != want.Token {
						t.Errorf("%s after the give-up: %+v, %v; want %s's grant %d, as before", name, got, err, want.Owner, want.Token)
					}
				}

				// Free: nothing is granted.
				giveUp("free", "gone", "w1")
				if n := grantsTo(ts, "gone"); n != 0 {
					t.Errorf("the give-up of a wait on a free lease made %d grants; want none", n)
				}
				if rec, err := s.Get(ctx, "free"); !errors.Is(err, leasehold.ErrNotFound) {
					t.Errorf("after the give-up on a free lease: %+v, %v; want it still free", rec, err)
				}
				first, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "free", Owner: "next", TTL: time.Minute})
				if err != nil || first.Token != 1 {
					t.Errorf("the next acquire: %+v, %v; want token 1 (the give-up granted nothing)", first, err)
				}

				// Another's: refused, the holder keeps it.
				other, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "other", Owner: "holder", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				giveUp("other", "gone", "w2")
				unchanged("other", other)

				// The owner's grant for another request: not the wait's.
				mine, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "mine", Owner: "same", RequestID: "another", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				giveUp("mine", "same", "w3")
				unchanged("mine", mine)

				// The wait's own grant (one that raced with its end): released.
				if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "raced", Owner: "gone", RequestID: "w4", TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
				giveUp("raced", "gone", "w4")
				if rec, err := s.Get(ctx, "raced"); !errors.Is(err, leasehold.ErrNotFound) {
					t.Errorf("after the give-up of a wait whose grant raced with its end: %+v, %v; want the grant released", rec, err)
				}
				if n := grantsTo(ts, "gone"); n != 1 {
					t.Errorf("%d grants to the waiters that had gone; want 1 (the raced grant made by the test)", n)
				}
			})
		}
	})
}
