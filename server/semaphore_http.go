package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/wire/httpwire"
)

// Semaphores over HTTP use the naming of the Go recipe (leasehold.Semaphore):
// permit I of semaphore NAME is the lease NAME/permit/I, so Go clients,
// the CLI (--permits) and HTTP clients share permits.
const httpPermitSep = "/permit/"

// semaphore serves POST /v1/semaphores/{name}/acquire. The preamble has
// checked write access on permit 0; the others are checked here, once the
// body says how many there are.
func (h *httpAPI) semaphore(q *httpReq, a *httpArgs) {
	name := a.name
	var body httpwire.SemaphoreBody
	if !h.decode(q, &body) {
		return
	}
	if body.Permits < 1 || body.Permits > leasehold.MaxPermits {
		h.fail(q, &leasehold.InvalidError{Field: "permits", Reason: fmt.Sprintf("%d must be in [1, %d]", body.Permits, leasehold.MaxPermits)})
		return
	}
	if err := httpCheckName(httpPermitName(name, body.Permits-1)); err != nil {
		h.fail(q, &leasehold.InvalidError{Field: "name", Reason: fmt.Sprintf("%q is too long to carry a permit suffix", name)})
		return
	}
	if !h.workflowWrite(q, httpPermitName(name, 0)) {
		return
	}
	// Every permit this request may take must be writable: a more
	// specific grant may deny some of them.
	for i := 1; i < body.Permits; i++ {
		if !h.allow(q, httpPermitName(name, i), AccessWrite) {
			return
		}
	}
	req, ctx, cancel, ok := h.acquireRequest(q, &body.AcquireBody, httpPermitName(name, 0))
	if !ok {
		return
	}
	defer cancel()
	rec, err := acquirePermit(ctx, h.b, name, body.Permits, req)
	if err != nil {
		var held *leasehold.HeldError
		if errors.As(err, &held) {
			q.err = err
			extra := httpwire.HeldMembers(held)
			extra["permits"] = body.Permits
			h.problem(q, http.StatusConflict, httpwire.Held, "All permits held",
				fmt.Sprintf("all %d permits of semaphore %q are held; the next to expire: %v", body.Permits, name, held), extra)
			return
		}
		h.fail(q, err)
		return
	}
	idx, _ := httpPermitIndex(name, rec.Name)
	lj := httpwire.LeaseOf(rec)
	lj.Session = req.Session
	lj.Permit = &idx
	lj.Secret = h.secret(rec)
	h.json(q, http.StatusOK, lj)
}

func httpPermitName(name string, i int) string { return name + httpPermitSep + strconv.Itoa(i) }

// httpPermitIndex is leasehold.PermitIndex.
func httpPermitIndex(semaphore, lease string) (int, bool) {
	return leasehold.PermitIndex(semaphore, lease)
}

// acquirePermit takes one of the n permits of sem for req: in b's own
// queue when b has one (PermitBackend), else with permitLoop.
func acquirePermit(ctx context.Context, b Backend, sem string, n int, req AcquireRequest) (leasehold.Record, error) {
	if req.GiveUp {
		return leasehold.Record{}, &leasehold.InvalidError{Field: "give_up", Reason: "is a lease's: a semaphore's wait is given up by a try (no wait) with its request id"}
	}
	if pb, ok := b.(PermitBackend); ok {
		return pb.AcquirePermit(ctx, sem, n, req)
	}
	if err := validatePermits(sem, n); err != nil {
		return leasehold.Record{}, err
	}
	return permitLoop(ctx, b, sem, n, req)
}

// permitLoop takes one of n permits of name over b's lease operations:
// one pass over the free ones (in random order), and with req.Wait, more
// passes whenever a permit may have become free (an event under
// NAME/permit/, or the soonest holder's expiry) until Wait elapses. It is
// not FIFO. When none is free it returns noPermit's error.
func permitLoop(ctx context.Context, b Backend, name string, n int, req AcquireRequest) (leasehold.Record, error) {
	wait := req.Wait
	req.Wait = 0
	deadline := time.Now().Add(wait)
	var events <-chan Event
	if wait > 0 {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events = b.Subscribe(sctx, name+httpPermitSep)
	}
	for {
		rec, soonest, err := semTry(ctx, b, name, n, req)
		if err == nil || soonest == nil {
			return rec, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return leasehold.Record{}, noPermit(name, n, soonest)
		}
		t := time.NewTimer(min(left, soonest.Remaining+time.Millisecond))
	waitLoop:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return leasehold.Record{}, ctx.Err()
			case <-t.C:
				break waitLoop
			case e, open := <-events:
				if !open {
					t.Stop()
					if ctx.Err() != nil {
						return leasehold.Record{}, ctx.Err()
					}
					return leasehold.Record{}, noPermit(name, n, soonest)
				}
				if httpwire.MayFree(string(e.Type)) {
					t.Stop()
					break waitLoop
				}
			}
		}
	}
}

// semTry makes one pass. On "all held" it returns soonest (and a nil
// error is never returned with a non-nil soonest).
func semTry(ctx context.Context, b Backend, name string, n int, req AcquireRequest) (leasehold.Record, *leasehold.HeldError, error) {
	holders, err := b.List(ctx, name+httpPermitSep)
	if err != nil {
		return leasehold.Record{}, nil, err
	}
	held := make(map[int]bool, len(holders))
	var soonest *leasehold.HeldError
	note := func(he *leasehold.HeldError) {
		if soonest == nil || he.Remaining < soonest.Remaining {
			soonest = he
		}
	}
	var mine, free []int
	for _, r := range holders {
		i, ok := httpPermitIndex(name, r.Name)
		if !ok {
			continue
		}
		held[i] = true
		if i < n {
			note(&leasehold.HeldError{Name: r.Name, Owner: r.Owner, Token: r.Token, Remaining: r.Remaining, Acquired: r.Acquired})
			// A retried request (same owner and request id) gets its
			// own permit back: try the permits this owner holds first.
			if req.RequestID != "" && r.Owner == req.Owner {
				mine = append(mine, i)
			}
		}
	}
	for i := 0; i < n; i++ {
		if !held[i] {
			free = append(free, i)
		}
	}
	rand.Shuffle(len(free), func(a, b int) { free[a], free[b] = free[b], free[a] })
	for _, i := range append(mine, free...) {
		r := req
		r.Name = httpPermitName(name, i)
		rec, err := b.Acquire(ctx, r)
		if err == nil {
			return rec, nil, nil
		}
		var he *leasehold.HeldError
		if !errors.As(err, &he) {
			return leasehold.Record{}, nil, err
		}
		note(he)
	}
	if soonest == nil { // every live permit is at or above n
		soonest = &leasehold.HeldError{Name: name, Remaining: 250 * time.Millisecond}
	}
	return leasehold.Record{}, soonest, leasehold.ErrNoPermit
}
