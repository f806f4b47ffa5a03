// Package remote is a leasehold.Store that talks to a leasehold server
// ("leasehold serve") over its HTTP/JSON API, so that the recipes of
// package leasehold (Lease, Semaphore, Election, Do) and the conformance
// suite run unchanged against a server:
//
//	s, err := remote.OpenHTTP("https://leases.internal:7070?ca=/etc/leasehold/ca.pem")
//	c, err := leasehold.New(s)
//	l, err := c.Acquire(ctx, "deploy/prod")
//
// The store implements leasehold.Watcher (server-sent events) and
// leasehold.Queuer: Client.Acquire waits in the server's FIFO queue with a
// long-poll instead of polling, and is granted the lease by the release or
// expiry that frees it.
//
// Errors map back to the root package's: a 409 "held" problem is a
// *leasehold.HeldError with the holder's owner, token and remaining time,
// "not-held" is leasehold.ErrNotHeld, a missing lease leasehold.ErrNotFound,
// a 400 a *leasehold.InvalidError with the field and reason. Other problems
// are *ProblemError values matching ErrUnauthorized, ErrForbidden,
// ErrRateLimited, ErrUnavailable or ErrNoSession with errors.Is.
//
// Sessions (OpenSession) let many leases share one keepalive: leases taken
// through Session.Store live as long as the session and end with it.
package remote
