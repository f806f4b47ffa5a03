package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold"
)

// --- sessions ---

// Session is a server session: leases acquired through its Store live as
// long as it does, kept alive by one keepalive for all of them, and are
// released by the server when it ends.
//
// It is also a leasehold.Bound, and its Store a leasehold.BoundedStore: a
// Lease taken through Store is lost no later than the session. The
// session's local deadline is t0 + TTL·(1−ρ) − ε, where t0 is taken (on the
// monotonic and the boot-time clock) before the last confirmed keepalive
// (or the open) was sent; the server frees the session's leases no earlier
// than TTL after it received that keepalive.
type Session struct {
	*keeper
	s *HTTPStore
}

var (
	_ leasehold.Bound        = (*Session)(nil)
	_ leasehold.BoundedStore = (*HTTPStore)(nil)
)

// OpenSession opens a session with the given TTL and keeps it alive in the
// background (every TTL/3) until Close. If the server refuses a keepalive
// (the session expired, or the server forgot it) or none is confirmed
// before the session's local deadline (see Session), the session is lost:
// Done closes, Err returns an error matching leasehold.ErrLost, and every
// Lease taken through its Store is lost at that moment; the server
// releases (or has released) those leases. A bad TTL or option is an
// *leasehold.InvalidError and opens nothing.
func (s *HTTPStore) OpenSession(ctx context.Context, ttl time.Duration, opts ...SessionOption) (*Session, error) {
	k, err := s.openSession(ctx, ttl, opts, func(err error) bool { return errors.Is(err, ErrNoSession) })
	if err != nil {
		return nil, err
	}
	return &Session{keeper: k, s: s}, nil
}

// ID is the session's id. Treat it as a secret: it lets its bearer close
// the session.
func (x *Session) ID() string { return x.id }

// TTL is the session's time to live.
func (x *Session) TTL() time.Duration { return x.ttl }

// Store returns a store whose acquires attach to the session (the
// server then keeps those leases alive with the session, and releases them
// when it ends). Leases taken through it are bounded by the session
// (leasehold.BoundedStore). Its Close does nothing; close the session
// instead.
func (x *Session) Store() *HTTPStore {
	return &HTTPStore{conn: x.s.conn, sess: x, borrowed: true}
}

// LeaseBound implements leasehold.BoundedStore: a grant made through a
// Session's Store is bounded by that session; other grants return nil.
func (s *HTTPStore) LeaseBound(leasehold.Record) leasehold.Bound {
	if s.sess == nil {
		return nil
	}
	return s.sess
}

// Close ends the session on the server, which releases its leases, and
// stops the keepalive. Leases taken through it are lost (their Err matches
// leasehold.ErrLost); Err then matches leasehold.ErrReleased. Closing
// twice, or a lost session, returns nil. Once the store is closed, Close
// cannot reach the server and returns leasehold.ErrClosed; the server then
// ends the session when its TTL runs out.
func (x *Session) Close(ctx context.Context) error {
	if x.halt() {
		return nil
	}
	lost := !x.end(fmt.Errorf("session %s closed: %w", x.id, leasehold.ErrReleased))
	err := x.s.sendCloseSession(ctx, x.id)
	if errors.Is(err, ErrNoSession) && lost {
		return nil
	}
	return err
}
