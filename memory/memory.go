// Package memory is an in-memory leasehold.Store, for tests and for
// programs that coordinate goroutines within one process. Its state is
// gone when the process exits, so it is not durable: tokens start again
// from 1 in a new Store.
package memory

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/clock"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/storekit/leasestate"
	"github.com/leasehold/leasehold/storekit/watchset"
)

var (
	_ leasehold.Store   = (*Store)(nil)
	_ leasehold.Watcher = (*Store)(nil)
)

// Store is an in-memory lease store. The zero value is not usable; call New.
// It is safe for concurrent use.
type Store struct {
	clock  clock.Clock
	origin time.Time

	mu     sync.Mutex
	rows   map[string]*leasestate.Row
	recs   recordState // versioned records (records.go)
	closed bool

	watch watchset.Set
}

// Option configures a Store.
type Option func(*config)

type config struct {
	clock clock.Clock
}

// WithClock sets the clock that judges expiry. Default: clock.Real().
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// New returns an empty store.
func New(opts ...Option) *Store {
	cfg := config{clock: clock.Real()}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Store{clock: cfg.clock, rows: map[string]*leasestate.Row{}}
	s.origin = s.clock.Now()
	return s
}

func (s *Store) now() int64 { return int64(s.clock.Now().Sub(s.origin)) }

// lock locks the store for an operation: ctx must still be live and the
// store open.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return leasehold.ErrClosed
	}
	return nil
}

// TryAcquire implements leasehold.Store.
func (s *Store) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	if err := req.Validate(); err != nil {
		return leasehold.Record{}, err
	}
	req.Data = bytes.Clone(req.Data)
	if err := s.lock(ctx); err != nil {
		return leasehold.Record{}, err
	}
	defer s.mu.Unlock()
	next, rec, err := leasestate.Acquire(s.rows[req.Name], req, s.now(), time.Now())
	if err != nil {
		return leasehold.Record{}, err
	}
	s.rows[req.Name] = &next
	rec.Data = bytes.Clone(rec.Data)
	return rec, nil
}

// Renew implements leasehold.Store.
func (s *Store) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	if err := storekit.ValidateRenew(name, owner, token, ttl); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	next, err := leasestate.Renew(s.rows[name], owner, token, ttl, s.now())
	if err != nil {
		return err
	}
	s.rows[name] = &next
	return nil
}

// Release implements leasehold.Store.
func (s *Store) Release(ctx context.Context, name, owner string, token uint64) error {
	if err := storekit.ValidateHolder(name, owner, token); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	next, changed, err := leasestate.Release(s.rows[name], owner, token)
	if err != nil || !changed {
		return err
	}
	s.rows[name] = &next
	s.watch.Notify(name)
	return nil
}

// Get implements leasehold.Store.
func (s *Store) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := storekit.ValidateName(name); err != nil {
		return leasehold.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return leasehold.Record{}, leasehold.ErrClosed
	}
	now := s.now()
	r := s.rows[name]
	if !r.Live(now) {
		return leasehold.Record{}, leasehold.ErrNotFound
	}
	rec := r.Record(now)
	rec.Data = bytes.Clone(rec.Data)
	return rec, nil
}

// List implements leasehold.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := storekit.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, leasehold.ErrClosed
	}
	now := s.now()
	var out []leasehold.Record
	for name, r := range s.rows {
		if strings.HasPrefix(name, prefix) && r.Live(now) {
			rec := r.Record(now)
			rec.Data = bytes.Clone(rec.Data)
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Watch implements leasehold.Watcher: the channel receives when the named
// lease is released. Expiry sends nothing; waiters wake at the holder's
// remaining time instead.
func (s *Store) Watch(ctx context.Context, name string) (<-chan struct{}, error) {
	if err := storekit.ValidateName(name); err != nil {
		return nil, err
	}
	return s.watch.Add(ctx, name)
}

// Close marks the store closed; later calls return leasehold.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.watch.Close()
	return nil
}
