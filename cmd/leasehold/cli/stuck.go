package cli

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
)

// abandonGrace bounds how long a store call of run, elect or hold may go
// on once its context has ended (the wait ran out, the attempt's bound
// passed, a signal came): a call still running then is left behind, so
// that a store that does not answer at all (a stopped server, whose
// connections are open but never read) cannot hold the command past its
// --wait or deaf to SIGTERM. Issue 31's red team: `run --wait 3s` with the
// store stopped returned after 18 s (PostgreSQL) and 12 s (Redis).
const abandonGrace = time.Second

// closeGrace bounds the close of the store when a wait ran out or a
// signal ended it: a close that waits for a call left behind
// (abandonGrace), or for what the store settles in the background (a
// PostgreSQL grant whose commit wait was cut, given back within 5 s),
// would hold the command as long as they take. Otherwise the close is
// waited for: run -n cut by --connect-timeout lets the store give back
// what its attempt may have granted. 200 ms: since the lease server's
// store awaits the give-up of a wait on Close (issue 27's red team, #5),
// a hung server held every hurried close for all of it, and R17's
// run(server)/late row (run --wait 1.5s returns within 2 s while the
// server does not answer) returned after 2,247 ms with 500 ms here (CI
// run 48); a healthy server answers a give-up in milliseconds.
const closeGrace = 200 * time.Millisecond

// errStoreStuck is the error of a store call left behind (abandonGrace).
var errStoreStuck = errors.New("the store did not answer")

// stuckBound runs f(ctx) and returns what it returns, or errStoreStuck if
// f is still running abandonGrace after giveUp ended (giveUp is ctx or
// one of its parents: the first attempt of run -n that runs out of its
// own bound, --connect-timeout, waits for the store to settle what it
// cut, as before; the end of a wait or a signal does not). A lease that a
// call left behind returns later is released (it has no holder), as far
// as the command still runs; otherwise it expires after its TTL.
func stuckBound(ctx, giveUp context.Context, f func(context.Context) (*leasehold.Lease, error)) (*leasehold.Lease, error) {
	type result struct {
		l   *leasehold.Lease
		err error
	}
	var mu sync.Mutex
	left := false
	ch := make(chan result, 1)
	go func() {
		l, err := f(ctx)
		mu.Lock()
		gone := left
		if !gone {
			ch <- result{l, err}
		}
		mu.Unlock()
		if gone && l != nil && err == nil {
			_ = releaseLease(l)
		}
	}()
	select {
	case r := <-ch:
		return r.l, r.err
	case <-giveUp.Done():
	}
	t := time.NewTimer(abandonGrace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.l, r.err
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-ch:
		return r.l, r.err
	default:
		left = true
		return nil, errStoreStuck
	}
}

// closeStore closes store, waiting at most closeGrace if hurry.
func closeStore(store leasehold.Store, hurry bool) {
	if !hurry {
		store.Close()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.Close()
	}()
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}
