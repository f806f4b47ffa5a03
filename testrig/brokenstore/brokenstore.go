// Package brokenstore is a deliberately wrong leasehold.Store: an in-memory
// store with one chosen bug. The conformance suite must catch every bug; it
// is the negative control that shows the suite can fail.
package brokenstore

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/leasestate"
)

// Bug selects the mistake the store makes.
type Bug int

const (
	// GrantWhileHeld grants a live lease to a second owner every third
	// conflicting request, as a store that forgets to re-check would.
	GrantWhileHeld Bug = iota + 1
	// NeverExpire ignores expiry: a crashed holder keeps the lease forever.
	NeverExpire
	// ReuseToken gives the next grant after a release the released token.
	ReuseToken
	// ReleaseAnyOwner releases on a matching token without checking owner.
	ReleaseAnyOwner
	// FastClock judges expiry on a clock running twice as fast, so leases
	// are taken over while their holders may still be alive.
	FastClock
	// The bugs of a Queuer (NewQueuer), whose queue is otherwise FIFO:
	//
	// QueueLIFO hands a freed lease to the newest waiter instead of the
	// oldest.
	QueueLIFO
	// QueueOvertake lets TryAcquire take a free lease ahead of queued
	// waiters: a release frees the lease and the head waiter takes it at
	// its next poll, unless a TryAcquire was first.
	QueueOvertake
	// QueueOrphan leaves a waiter whose context ended in the queue, where
	// it is granted the lease when its turn comes (and keeps it until its
	// TTL runs out).
	QueueOrphan
	// WaitGrantWhileHeld has AcquireWait grant a lease that someone else
	// holds, every second wait.
	WaitGrantWhileHeld
)

// Bugs lists every bug of a plain Store, for tests that try them all.
var Bugs = []Bug{GrantWhileHeld, NeverExpire, ReuseToken, ReleaseAnyOwner, FastClock}

// QueueBugs lists the bugs of a Queuer's queue (NewQueuer).
var QueueBugs = []Bug{QueueLIFO, QueueOvertake, QueueOrphan, WaitGrantWhileHeld}

func (b Bug) String() string {
	return [...]string{"none", "GrantWhileHeld", "NeverExpire", "ReuseToken", "ReleaseAnyOwner", "FastClock",
		"QueueLIFO", "QueueOvertake", "QueueOrphan", "WaitGrantWhileHeld"}[b]
}

// Store is the broken store.
type Store struct {
	bug       Bug
	clock     clock.Clock
	origin    time.Time
	mu        sync.Mutex
	rows      map[string]*leasestate.Row
	conflicts int
}

var _ leasehold.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that judges expiry (default clock.Real()), so
// that tests with a fake clock can drive the broken store too.
func WithClock(c clock.Clock) Option { return func(s *Store) { s.clock = c } }

// New returns a store with the given bug.
func New(bug Bug, opts ...Option) *Store {
	s := &Store{bug: bug, clock: clock.Real(), rows: map[string]*leasestate.Row{}}
	for _, o := range opts {
		o(s)
	}
	s.origin = s.clock.Now()
	return s
}

func (s *Store) now() int64 {
	d := int64(s.clock.Now().Sub(s.origin))
	switch s.bug {
	case FastClock:
		return 2 * d
	case NeverExpire:
		return 0
	}
	return d
}

// TryAcquire implements leasehold.Store, with the bug.
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tryAcquireLocked(req)
}

// tryAcquireLocked is TryAcquire with s.mu held and req valid.
func (s *Store) tryAcquireLocked(req leasehold.AcquireRequest) (leasehold.Record, error) {
	cur := s.rows[req.Name]
	now := s.now()
	if s.bug == GrantWhileHeld && cur.Live(now) && cur.RequestID != req.RequestID {
		s.conflicts++
		if s.conflicts%3 == 0 {
			c := *cur
			c.Held = false
			cur = &c
		}
	}
	next, rec, err := leasestate.Acquire(cur, req, now, time.Now())
	if err != nil {
		return rec, err
	}
	if s.bug == ReuseToken && cur != nil && !cur.Held {
		next.Token = cur.Token
		rec.Token = cur.Token
	}
	s.rows[req.Name] = &next
	return rec, nil
}

// Renew implements leasehold.Store.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := storekit.ValidateTTL(ttl); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := leasestate.Renew(s.rows[name], owner, token, ttl, s.now())
	if err == nil {
		s.rows[name] = &next
	}
	return err
}

// Release implements leasehold.Store, with the bug.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseLocked(name, owner, token)
}

// releaseLocked is Release with s.mu held and valid arguments.
func (s *Store) releaseLocked(name, owner string, token uint64) error {
	cur := s.rows[name]
	if s.bug == ReleaseAnyOwner && cur != nil {
		owner = cur.Owner
	}
	next, changed, err := leasestate.Release(cur, owner, token)
	if err == nil && changed {
		s.rows[name] = &next
	}
	return err
}

// Get implements leasehold.Store.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[name]
	if !r.Live(s.now()) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	return r.Record(s.now()), nil
}

// List implements leasehold.Store (all live leases, unsorted prefix
// filtering is not what is under test).
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return nil, nil
}

// Close implements leasehold.Store.
func (s *Store) Close() error { return nil }
