package leasehold

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/check"
)

// Store is the seam between leasehold's recipes and an engine. Each method
// is one atomic, conditional operation on the engine (one round trip on a
// networked engine). Expiry is judged by the store's own clock, never the
// caller's. Every store in this module passes the conformance suite in
// package storetest.
//
// Stores validate their arguments (see AcquireRequest.Validate, and
// package storekit for the checks a store makes) and return an *InvalidError without changing anything when
// they are bad. Errors from the engine are translated at the store boundary;
// no engine type leaks through this interface.
type Store interface {
	// TryAcquire grants the lease to req.Owner if it is free, expired, or
	// already granted to the same owner by the same non-empty
	// req.RequestID (a retried acquire, which gets the same token back and
	// its expiry refreshed). A new grant's token is strictly greater than
	// every earlier token for that name. If someone else holds the lease it
	// returns a *HeldError and changes nothing.
	TryAcquire(ctx context.Context, req AcquireRequest) (Record, error)
	// Renew extends the lease to ttl from now if owner and token still hold
	// it and it has not expired; otherwise it returns ErrNotHeld and changes
	// nothing.
	Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error
	// Release frees the lease if owner and token match its latest grant.
	// Releasing an already released (or expired, not yet retaken) grant of
	// one's own again returns nil while the store remembers that grant. A
	// store that forgets freed grants says when (the lease server: not
	// before 10 minutes after the grant was freed, restarts included, for
	// up to 1,048,576 most recently freed grants taking up to 64 MiB, both
	// configurable; docs/server.md); a repeat
	// after that returns ErrNotHeld, the lease being free either way. A
	// release by anyone else returns ErrNotHeld and changes nothing.
	Release(ctx context.Context, name, owner string, token uint64) error
	// Get returns the live lease with that name, or ErrNotFound.
	Get(ctx context.Context, name string) (Record, error)
	// List returns the live leases whose names start with prefix, sorted by
	// name. An empty prefix lists all.
	List(ctx context.Context, prefix string) ([]Record, error)
	// Close releases the store's resources (not its leases).
	Close() error
}

// Watcher is implemented by stores that can push a notification when a
// lease may have become free. Waiters use it instead of polling.
type Watcher interface {
	// Watch returns a channel that receives a value (without blocking the
	// store) whenever the named lease is released or may have become free.
	// Notifications coalesce; a receiver must re-check with TryAcquire. The
	// channel is closed after ctx ends.
	Watch(ctx context.Context, name string) (<-chan struct{}, error)
}

// AcquireRequest is the argument of Store.TryAcquire.
type AcquireRequest struct {
	Name  string
	Owner string
	// RequestID identifies one logical acquire. A retry carrying the same id
	// (after a lost reply) gets its own grant back instead of waiting
	// behind itself. Empty disables that recognition.
	RequestID string
	TTL       time.Duration
	Data      []byte
}

// Validate checks every field of an acquire request: the name and owner (1
// to MaxNameLen and MaxOwnerLen bytes of valid UTF-8 without control
// characters; names are compared byte for byte and never normalised), the
// request id (empty or up to MaxRequestIDLen bytes), the TTL (within
// [MinTTL, MaxTTL]) and the data (at most MaxDataLen bytes).
func (r AcquireRequest) Validate() error {
	for _, p := range []*check.Problem{check.Name(r.Name), check.Owner(r.Owner),
		check.RequestID(r.RequestID), check.TTL(r.TTL), check.Data(r.Data)} {
		if p != nil {
			return asInvalid(p)
		}
	}
	return nil
}

// Record describes a lease as a store sees it.
type Record struct {
	Name  string
	Owner string
	// Token is the fencing token of this grant.
	Token uint64
	Data  []byte
	// TTL is the lease's time to live, renewed from each renewal.
	TTL time.Duration
	// Remaining is the time left before expiry by the store's clock when
	// the record was read.
	Remaining time.Duration
	// Acquired is the wall-clock time of the grant, for display only.
	Acquired time.Time
}

// Queuer is implemented by stores that queue waiters themselves (the
// leasehold server): waiters are granted in arrival order, by the release
// or expiry that frees the lease, without polling. Client.Acquire uses it
// when the store has it.
type Queuer interface {
	// AcquireWait grants the lease to req, waiting in the store's queue
	// while someone else holds it, until ctx ends (ctx's error; the store
	// drops the waiter, and releases a grant that raced with the end).
	//
	// Called with a ctx that has already ended, it removes what an earlier
	// call with the same owner and non-empty request id left behind (an
	// entry left by a call that failed with a lost connection, and a grant
	// handed to it since), best effort and within a short timeout of its
	// own, and returns ctx's error. Client.Acquire does that when it gives
	// up after such a failure.
	AcquireWait(ctx context.Context, req AcquireRequest) (Record, error)
}

// PermitWaiter is implemented by stores that take a semaphore's permits
// and queue its waiters themselves (the leasehold server): waiters are
// granted in arrival order, by the release or expiry that frees a permit
// they may take, and the server counts and lists them. Semaphore's
// TryAcquire and Acquire use it when the store has it.
type PermitWaiter interface {
	// AcquirePermit takes one of the permits 0..n-1 of semaphore (the
	// leases semaphore/permit/I) for req; req.Name is ignored, the grant's
	// Record names the permit. wait 0 tries once; wait > 0 waits up to
	// wait in the store's queue of the semaphore (a wait that runs out
	// gives its place up). When every permit stays held it returns an
	// error matching ErrNoPermit that wraps the *HeldError of the permit
	// that expires first (errors.As). A retry
	// with the same owner and request id gets its own permit back. When
	// ctx ends it returns ctx's error (the store drops the waiter, and
	// releases a grant that raced with the end). A store that finds its
	// server without the operation (an older one) returns an error
	// matching errors.ErrUnsupported and changes nothing.
	AcquirePermit(ctx context.Context, semaphore string, n int, req AcquireRequest, wait time.Duration) (Record, error)
}
