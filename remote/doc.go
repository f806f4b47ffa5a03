// Package remote holds the leasehold.Store implementations that talk to a
// leasehold server ("leasehold serve"), so that the recipes of package
// leasehold (Lease, Semaphore, Election, Do) and the conformance suite run
// unchanged against a server. Open picks one by URL scheme:
//
//   - HTTPStore (OpenHTTP; http:// and https://) speaks the HTTP/JSON API
//     (docs/http-api.md): it works through proxies and load balancers.
//
//   - RESPStore (OpenRESP; leasehold:// and leaseholds://) speaks the
//     pipelined RESP protocol (docs/protocol.md): the fastest.
//
// For example:
//
//	s, err := remote.OpenHTTP("https://leases.internal:7070?ca=/etc/leasehold/ca.pem")
//	c, err := leasehold.New(s)
//	l, err := c.Acquire(ctx, "deploy/prod")
//
// HTTPStore implements leasehold.Watcher (server-sent events) and
// leasehold.Queuer: Client.Acquire waits in the server's FIFO queue with a
// long-poll instead of polling, and is granted the lease by the release or
// expiry that frees it.
//
// Errors map back to the root package's: a 409 "held" problem is a
// *leasehold.HeldError with the holder's owner, token and remaining time,
// "not-held" is leasehold.ErrNotHeld, a missing lease leasehold.ErrNotFound,
// a 400 a *leasehold.InvalidError with the field and reason. Other problems
// are *ProblemError values matching ErrUnauthorized, ErrForbidden,
// ErrRateLimited, ErrUnavailable, ErrNoSession or ErrBadProof with
// errors.Is.
//
// Holder proofs: the server answers each grant with a secret that only the
// acquirer gets, and renew and release must send it (a lease's owner and
// token are visible to every reader). Both stores keep the secrets of the
// grants acquired through them and send them; a refusal (a store that did
// not acquire the grant, or a server whose holder key changed) matches
// ErrBadProof and leasehold.ErrNotHeld, so a Lease counts as lost. To let
// another process release a grant, hand over HolderSecret's value and give
// it to that process's store with SetHolderSecret.
//
// Sessions (OpenSession) let many leases share one keepalive: leases taken
// through Session.Store (or RESPSession.Store) live as long as the session
// and end with it — the server frees them when the session ends, whatever
// their own TTL. A leasehold.Lease taken through such a store knows it: the
// store is a leasehold.BoundedStore and the session a leasehold.Bound, so
// the lease's local deadline is the earlier of its own and the session's,
// and the lease is lost (Done closes, Err matches leasehold.ErrLost) as soon
// as the session is lost — a keepalive refused, none confirmed by the
// session's deadline, or Close. The session's deadline is t0 + TTL·(1−ρ) − ε,
// with t0 read on the monotonic and the boot-time clock before the last
// confirmed keepalive (or the open) was sent; pass SessionClock with the
// Client's clock when the Client has an injected one (leasehold.WithClock).
//
// The bearer token comes from the URL (?token=) or $LEASEHOLD_AUTH_TOKEN;
// not from $LEASEHOLD_TOKEN, which "leasehold run" sets to the fencing
// token of the lease it holds.
package remote
