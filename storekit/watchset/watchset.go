// Package watchset keeps the watchers of a store's Watch: per lease name, a
// set of channels that receive a value, without blocking the store, when
// the name may have become free. Stores own one Set and call Notify from
// their release path (or from whatever push their engine has).
package watchset

import (
	"context"
	"sync"

	"github.com/leasehold/leasehold"
)

// Set is a registry of watch channels. The zero value is ready to use and
// safe for concurrent use.
type Set struct {
	mu     sync.Mutex
	byName map[string]map[chan struct{}]struct{}
	closed bool
}

// Add registers a watcher of name and returns its channel: buffered (one
// value; notifications coalesce), closed after ctx ends or the Set is
// closed. It returns leasehold.ErrClosed after Close.
func (s *Set) Add(ctx context.Context, name string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, leasehold.ErrClosed
	}
	if s.byName == nil {
		s.byName = map[string]map[chan struct{}]struct{}{}
	}
	if s.byName[name] == nil {
		s.byName[name] = map[chan struct{}]struct{}{}
	}
	s.byName[name][ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() { s.remove(name, ch) })
	return ch, nil
}

// remove unregisters ch and closes it, unless Close already did.
func (s *Set) remove(name string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byName[name][ch]; !ok {
		return
	}
	delete(s.byName[name], ch)
	if len(s.byName[name]) == 0 {
		delete(s.byName, name)
	}
	close(ch)
}

func send(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Notify wakes the watchers of name.
func (s *Set) Notify(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.byName[name] {
		send(ch)
	}
}

// NotifyAll wakes every watcher (after a notification may have been
// missed, for example while a push connection was down).
func (s *Set) NotifyAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, chans := range s.byName {
		for ch := range chans {
			send(ch)
		}
	}
}

// Names returns the watched names, in no particular order.
func (s *Set) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.byName))
	for n := range s.byName {
		out = append(out, n)
	}
	return out
}

// Len returns the number of watched names.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byName)
}

// Close closes every watcher's channel; later Adds return ErrClosed.
func (s *Set) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, chans := range s.byName {
		for ch := range chans {
			close(ch)
		}
	}
	s.byName = nil
}
