// Package server is the leasehold lease server: an Engine (in-memory lease
// state with FIFO wait queues, sessions and a group-committed log) or a
// Proxy in front of any other leasehold.Store, served over an HTTP/JSON API
// (with a dashboard and metrics) and a pipelined RESP protocol.
package server

import (
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold"
)

// AcquireRequest is a lease request as the server takes it: a store
// request, optionally attached to a session and optionally waiting.
type AcquireRequest struct {
	leasehold.AcquireRequest
	// Session attaches the lease to an open session: the lease lives as
	// long as the session does (the session's keepalive covers it) and is
	// released when the session ends. Its TTL is then ignored.
	Session string
	// Wait > 0 queues the request behind earlier waiters (FIFO) for at most
	// Wait when the lease is held. Zero tries once.
	Wait time.Duration
	// GiveUp ends the wait of RequestID whose caller has gone (RequestID
	// set; no Wait, no Session): it gives up the place the server keeps
	// for it between polls, releases the grant that request holds and
	// answers with it, but never grants the lease: a lease held by another
	// request is a *HeldError, a free one ErrNotFound. Without it, the
	// give-up's try took a lease freed meanwhile for a caller that had
	// gone (CI run 79).
	GiveUp bool
}

// Backend is what the HTTP and RESP front ends serve. Engine (the native,
// durable server state) and Proxy (in front of another store) implement it.
// Errors are leasehold's: *HeldError, ErrNotHeld, ErrNotFound,
// *InvalidError, ErrClosed, ErrNoSession, or a context's.
type Backend interface {
	// Acquire grants the lease, or with req.Wait > 0 waits in FIFO order
	// until it is granted, Wait elapses (a *HeldError naming the holder) or ctx ends (ctx's
	// error; the waiter is dropped from the queue, and a grant that raced
	// with the cancellation is released).
	Acquire(ctx context.Context, req AcquireRequest) (leasehold.Record, error)
	Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error
	Release(ctx context.Context, name, owner string, token uint64) error
	// ForceRelease frees a lease whoever holds it (an admin action) and
	// returns the grant it ended, or ErrNotFound.
	ForceRelease(ctx context.Context, name string) (leasehold.Record, error)
	Get(ctx context.Context, name string) (leasehold.Record, error)
	List(ctx context.Context, prefix string) ([]leasehold.Record, error)
	// Waiters lists the requests queued on name, in grant order; for a
	// semaphore's permit (NAME/permit/I), then the semaphore's waiters that
	// may take it (PermitBackend).
	Waiters(name string) []Waiter
	// Subscribe delivers events for names starting with prefix until ctx
	// ends; the channel is then closed. A subscriber that falls more than
	// the channel's buffer behind gets one EventOverflow and must re-read.
	Subscribe(ctx context.Context, prefix string) <-chan Event
	// Recent returns up to n of the latest events, oldest first.
	Recent(n int) []Event

	OpenSession(ctx context.Context, ttl time.Duration) (Session, error)
	KeepAlive(ctx context.Context, id string) (Session, error)
	// CloseSession ends a session and releases its leases. Closing an
	// unknown or ended session returns ErrNoSession.
	CloseSession(ctx context.Context, id string) error

	// Ready reports nil when the backend can serve (log open, engine
	// reachable).
	Ready(ctx context.Context) error
	Stats() Stats
	Close() error
}

// Session is a client session: leases attached to it share its keepalive.
type Session struct {
	ID        string
	TTL       time.Duration
	Remaining time.Duration
	Leases    int
}

// Waiter describes a queued acquire.
type Waiter struct {
	Owner   string
	Session string
	Since   time.Time     // wall clock, when it was queued
	Waited  time.Duration // so far
}

// EventType names what happened to a lease.
type EventType string

const (
	EventGranted  EventType = "granted"  // a new grant (Token is the new token)
	EventRenewed  EventType = "renewed"  // a holder renewed
	EventReleased EventType = "released" // the holder released
	EventForced   EventType = "forced"   // an admin force-released
	EventExpired  EventType = "expired"  // the lease's TTL (or its session) ran out
	EventQueued   EventType = "queued"   // a waiter joined the queue
	EventDequeued EventType = "dequeued" // a waiter left without a grant (timeout, cancel)
	EventOverflow EventType = "overflow" // the subscriber missed events: re-read state
)

// Event is one change, delivered after it is durable.
type Event struct {
	Type  EventType
	Name  string
	Owner string
	Token uint64
	Time  time.Time // wall clock
	// Handoff is set on a grant made to a queued waiter by a release or
	// expiry: the time from the release (or expiry) to the grant.
	Handoff time.Duration
	Waiters int // queue length after the event
}

// Stats are gauges for metrics and the dashboard.
type Stats struct {
	Held     int // live leases
	Waiters  int // queued acquires, all names
	Sessions int
	Durable  bool // acknowledged grants survive a crash
}

// Hooks receive measurements from a Backend. Nil fields are skipped. They
// are called synchronously and must be fast.
type Hooks struct {
	Event func(Event)
	// Sync is called after each group commit: its duration and how many
	// records it made durable.
	Sync func(d time.Duration, records int)
}

// ErrNoSession reports an unknown, closed or expired session.
var ErrNoSession = errors.New("no such session (unknown, closed or expired)")
