package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// RESPSession is a server session: leases taken through its Store live as
// long as the session does, kept alive by one keepalive (every TTL/3) for
// all of them, and are released by the server when it ends. It ends when
// Close is called or when it cannot be kept alive: a keepalive refused (the
// server does not know it any more) or none confirmed before the session's
// local deadline. Done is then closed and Err says why.
//
// It is also a leasehold.Bound, and its Store a leasehold.BoundedStore: a
// Lease taken through Store is lost no later than the session. The
// session's local deadline is t0 + TTL·(1−ρ) − ε, where t0 is taken (on the
// monotonic and the boot-time clock) before the last confirmed keepalive
// (or the open) was sent; the server frees the session's leases no earlier
// than TTL after it received that keepalive.
type RESPSession struct {
	*keeper
	s *RESPStore
}

var _ leasehold.Bound = (*RESPSession)(nil)

// OpenSession opens a session with the given TTL and starts its keepalive.
// A bad TTL or option is an *leasehold.InvalidError and opens nothing.
func (s *RESPStore) OpenSession(ctx context.Context, ttl time.Duration, opts ...SessionOption) (*RESPSession, error) {
	k, err := s.openSession(ctx, ttl, opts, func(err error) bool {
		return errors.Is(err, ErrNoSession) || errors.Is(err, leasehold.ErrClosed)
	})
	if err != nil {
		return nil, err
	}
	return &RESPSession{keeper: k, s: s}, nil
}

// ID returns the session's id. Treat it as a secret.
func (ss *RESPSession) ID() string { return ss.id }

// TTL is the session's time to live.
func (ss *RESPSession) TTL() time.Duration { return ss.ttl }

// Close ends the session: it stops the keepalive and asks the server to
// close the session, which releases its leases. Leases taken through it are
// lost (their Err matches leasehold.ErrLost); Err then matches
// leasehold.ErrReleased. Closing an ended session returns nil if Close
// already ended it, else the error that ended it.
//
// The session ends here, and its leases are lost, before the server is
// asked to close it: the server frees the leases as soon as it reads the
// request, so no lease may still count as held by then, also when the
// reply is lost.
func (ss *RESPSession) Close(ctx context.Context) error {
	ss.halt()
	if !ss.end(fmt.Errorf("session %s closed: %w", ss.id, leasehold.ErrReleased)) {
		if err := ss.Err(); !errors.Is(err, leasehold.ErrReleased) {
			return err
		}
		return nil
	}
	if err := ss.s.sendCloseSession(ctx, ss.id); err != nil && !errors.Is(err, ErrNoSession) {
		return err
	}
	return nil
}

// Store returns a view of the store whose acquires attach their leases to
// the session: the server frees them when the session ends, whatever their
// own TTL, and a Lease taken through the view is lost no later than the
// session (leasehold.BoundedStore). Renew, Release, Get and List are the
// store's. Closing the view closes nothing.
func (ss *RESPSession) Store() leasehold.Store { return sessionStore{ss} }

type sessionStore struct{ ss *RESPSession }

var (
	_ leasehold.Store        = sessionStore{}
	_ leasehold.Queuer       = sessionStore{}
	_ leasehold.PermitWaiter = sessionStore{}
	_ leasehold.BoundedStore = sessionStore{}
)

// LeaseBound implements leasehold.BoundedStore: every grant made through
// the view is bounded by its session.
func (v sessionStore) LeaseBound(leasehold.Record) leasehold.Bound { return v.ss }

func (v sessionStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return v.ss.s.tryAcquire(ctx, req, v.ss.keeper)
}

func (v sessionStore) AcquireWait(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return v.ss.s.acquireWait(ctx, req, v.ss.keeper)
}

// AcquirePermit implements leasehold.PermitWaiter: the permit is attached
// to the session.
func (v sessionStore) AcquirePermit(ctx context.Context, sem string, n int, req leasehold.AcquireRequest, wait time.Duration) (leasehold.Record, error) {
	return v.ss.s.acquirePermit(ctx, sem, n, req, wait, v.ss.keeper)
}

func (v sessionStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	return v.ss.s.Renew(ctx, name, owner, token, ttl)
}

func (v sessionStore) Release(ctx context.Context, name, owner string, token uint64) error {
	return v.ss.s.Release(ctx, name, owner, token)
}

func (v sessionStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return v.ss.s.Get(ctx, name)
}

func (v sessionStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return v.ss.s.List(ctx, prefix)
}

func (v sessionStore) Close() error { return nil }
