package remote

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

// Semaphores: one of a semaphore's permits, taken by the server (POST
// /v1/semaphores/{name}/acquire, LH.SEMACQUIRE), which queues the
// semaphore's waiters in arrival order and counts them. The waiting is
// the core's (waitLoop): long-polls with one request id, whose place the
// server keeps between them.

var (
	_ leasehold.PermitWaiter = (*HTTPStore)(nil)
	_ leasehold.PermitWaiter = (*RESPStore)(nil)
)

// AcquirePermit implements leasehold.PermitWaiter.
func (s *HTTPStore) AcquirePermit(ctx context.Context, sem string, n int, req leasehold.AcquireRequest, wait time.Duration) (leasehold.Record, error) {
	return s.acquirePermit(ctx, sem, n, req, wait, s.bound())
}

// AcquirePermit implements leasehold.PermitWaiter. Waiting runs on a
// dedicated connection, as AcquireWait's.
func (s *RESPStore) AcquirePermit(ctx context.Context, sem string, n int, req leasehold.AcquireRequest, wait time.Duration) (leasehold.Record, error) {
	return s.acquirePermit(ctx, sem, n, req, wait, nil)
}

// maxPermitWait: a longer wait lasts until ctx ends.
const maxPermitWait = 100 * 365 * 24 * time.Hour

// checkPermits checks a semaphore's arguments as the server does.
func checkPermits(sem string, n int) error {
	if n < 1 || n > leasehold.MaxPermits {
		return &leasehold.InvalidError{Field: "permits", Reason: fmt.Sprintf("%d must be in [1, %d]", n, leasehold.MaxPermits)}
	}
	if err := storekit.ValidateName(sem); err != nil {
		return err
	}
	if storekit.ValidateName(permitName(sem, n-1)) != nil {
		return &leasehold.InvalidError{Field: "name", Reason: fmt.Sprintf("%q is too long to carry a permit suffix", sem)}
	}
	return nil
}

func permitName(sem string, i int) string { return fmt.Sprintf("%s/permit/%d", sem, i) }

// isPermitOf reports whether name is one of the n permits of sem.
func isPermitOf(name, sem string, n int) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(name, sem+"/permit/"))
	return err == nil && name == permitName(sem, i) && i >= 0 && i < n
}

// noPermit is the refusal of a semaphore whose permits are all held.
func noPermit(sem string, n int, err error) error {
	var held *leasehold.HeldError
	if !errors.As(err, &held) || errors.Is(err, leasehold.ErrNoPermit) {
		return err
	}
	return fmt.Errorf("semaphore %q (%d permits): %w; the next to expire: %w", sem, n, leasehold.ErrNoPermit, held)
}

// acquirePermit takes one of n permits of sem, attached to session k
// (nil: none): with wait 0 one try; with wait > 0 the core's wait in the
// server's queue (long-polls with one request id) for up to wait.
func (c *core) acquirePermit(ctx context.Context, sem string, n int, req leasehold.AcquireRequest, wait time.Duration, k *keeper) (leasehold.Record, error) {
	if err := checkPermits(sem, n); err != nil {
		return leasehold.Record{}, err
	}
	req.Name = permitName(sem, 0)
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	if err := c.check(); err != nil {
		return leasehold.Record{}, err
	}
	send := func(ctx context.Context, r *leasehold.AcquireRequest, session string, w time.Duration, late func(grant, error)) (grant, error) {
		return c.t.sendPermit(ctx, sem, n, r, session, w, late)
	}
	if wait <= 0 {
		g, err := send(ctx, &req, k.sessionID(), 0, nil)
		if err != nil {
			return leasehold.Record{}, noPermit(sem, n, err)
		}
		c.keepSecret(g, k)
		return g.rec, nil
	}
	if req.RequestID == "" {
		req.RequestID = randid.Hex(12)
	}
	// No try first: a try with the request id of a place the server keeps
	// between polls gives that place up.
	var held error = &leasehold.HeldError{Name: sem}
	// reclaim gives up the wait of a caller that has gone: a grant whose
	// reply was lost is this request's permit; a try with its request id
	// gets it back, and it is released. The try is only sent while the
	// owner holds one of sem's permits: sent blindly, it took a permit
	// freed meanwhile for a caller that had gone (until it released it),
	// in front of the semaphore's waiters. Or, once, while others hold all
	// n permits: the try is refused then, and so gives up the place the
	// server keeps between polls (without it, a permit freed within the
	// next 5 s went to the waiter that had gone: issue 27's red team, #5).
	reclaim := func() {
		rctx, cancel := context.WithTimeout(c.ctx, reclaimTimeout)
		defer cancel()
		take := func(ctx context.Context) {
			if g, err := send(ctx, &req, k.sessionID(), 0, nil); err == nil {
				c.keepSecret(g, k)
				_ = c.release(ctx, g.rec.Name, g.rec.Owner, g.rec.Token)
			}
		}
		placeGiven := false
		c.reclaimLooks(rctx, func(ctx context.Context) (bool, error) {
			recs, err := c.list(ctx, sem+"/permit/")
			if err != nil {
				return false, err
			}
			others := 0
			for _, r := range recs {
				if !isPermitOf(r.Name, sem, n) {
					continue
				}
				if r.Owner == req.Owner {
					return true, nil
				}
				others++
			}
			if others >= n && !placeGiven {
				placeGiven = true
				take(ctx) // refused: the place is given up
			}
			return false, nil
		}, take)
	}
	var until time.Time
	if wait < maxPermitWait {
		until = time.Now().Add(wait)
	}
	rec, err := c.waitLoop(ctx, req, k, send, reclaim, func(err error) { held = err }, until)
	if errors.Is(err, errWaitRanOut) {
		// Its own wait ran out: a last try with its request id gives up the
		// place the server keeps after a poll (else a permit freed within
		// the next 5 s would wait for nobody), or takes a permit free now.
		g, err := send(ctx, &req, k.sessionID(), 0, nil)
		if err != nil {
			if errors.Is(err, leasehold.ErrHeld) {
				return leasehold.Record{}, noPermit(sem, n, err)
			}
			return leasehold.Record{}, noPermit(sem, n, held)
		}
		c.keepSecret(g, k)
		return g.rec, nil
	}
	if err != nil {
		return leasehold.Record{}, noPermit(sem, n, err)
	}
	return rec, nil
}
