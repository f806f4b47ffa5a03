package server

// The engine (engine.go). Sessions: open, keep alive, close, and their end releasing their leases.

import (
	"context"
	"sort"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/internal/randid"
	"github.com/leasehold/leasehold/storekit"
)

func (s *engSession) liveAt(now int64) bool { return !s.ended && now < s.dl.at }

// OpenSession implements Backend.
func (e *Engine) OpenSession(ctx context.Context, ttl time.Duration) (Session, error) {
	if err := e.lockOpen(storekit.ValidateTTL(ttl)); err != nil {
		return Session{}, err
	}
	ch := make(chan error, 1)
	s := e.newSession(randid.Hex(16), ttl)
	now := e.now()
	e.sdl.set(s, now+int64(ttl))
	e.pokeIfEarlier()
	e.commit(nil, encodeSessionOpen(s), func(err error) { ch <- err })
	info := Session{ID: s.id, TTL: ttl, Remaining: ttl}
	e.unlock()
	if err := <-ch; err != nil {
		return Session{}, err
	}
	return info, nil
}

func (e *Engine) newSession(id string, ttl time.Duration) *engSession {
	s := &engSession{id: id, ttl: ttl, leases: map[*engEntry]struct{}{}, waits: map[*engWaiter]struct{}{}}
	s.dl.idx = -1
	e.sessions[id] = s
	return s
}

// KeepAlive implements Backend.
func (e *Engine) KeepAlive(ctx context.Context, id string) (Session, error) {
	e.lock()
	defer e.unlock()
	if e.closed {
		return Session{}, leasehold.ErrClosed
	}
	now := e.now()
	s := e.sessions[id]
	if s == nil || !s.liveAt(now) {
		return Session{}, ErrNoSession
	}
	e.sdl.set(s, now+int64(s.ttl))
	e.pokeIfEarlier()
	return Session{ID: s.id, TTL: s.ttl, Remaining: s.ttl, Leases: len(s.leases)}, nil
}

// CloseSession implements Backend.
func (e *Engine) CloseSession(ctx context.Context, id string) error {
	if err := e.lockOpen(); err != nil {
		return err
	}
	ch := make(chan error, 1)
	s := e.sessions[id]
	if s == nil || !s.liveAt(e.now()) {
		e.unlock()
		return ErrNoSession
	}
	e.endSession(s, e.now(), EventReleased, func(err error) { ch <- err })
	e.unlock()
	return <-ch
}

// endSession frees a session's leases (handing each to its next waiter),
// drops its waiters and logs its end. e.mu held.
func (e *Engine) endSession(s *engSession, now int64, why EventType, done func(error)) {
	s.ended = true
	e.sdl.remove(s)
	delete(e.sessions, s.id)
	for w := range s.waits {
		e.leave(w)
		w.ch <- grantResult{err: ErrNoSession}
	}
	ents := make([]*engEntry, 0, len(s.leases))
	for ent := range s.leases {
		ents = append(ents, ent)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	for _, ent := range ents {
		if ent.held {
			e.free(ent, now, why, nil)
		}
	}
	e.commit(nil, encodeSessionClose(s.id), func(err error) {
		if done != nil {
			done(err)
		}
	})
}

// leave removes a waiter that leaves without a grant from its queue: its
// lease's, or its semaphore's. e.mu held.
func (e *Engine) leave(w *engWaiter) {
	if w.sem != "" {
		e.dequeuePermit(w)
		return
	}
	if ent := e.leases[w.req.Name]; ent != nil {
		e.dequeue(ent, w)
	}
}
