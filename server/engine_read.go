package server

// The engine (engine.go). Reads: Get, List, waiters, events, readiness and stats.

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

// Get implements Backend. It reports only durable state: a grant, release
// or expiry of name still waiting for its group commit (acknowledged to no
// one yet, and undone by a crash before the commit) is reported once it is
// durable, so Get may wait for the group commit under way and the next.
func (e *Engine) Get(ctx context.Context, name string) (leasehold.Record, error) {
	if err := e.lockOpen(storekit.ValidateName(name)); err != nil {
		return leasehold.Record{}, err
	}
	now := e.now()
	ent := e.leases[name]
	if !ent.live(now) {
		return leasehold.Record{}, e.refuse(ent, leasehold.ErrNotFound)
	}
	rec := ent.record(now)
	if err := e.settle(ent); err != nil {
		return leasehold.Record{}, err
	}
	return rec, nil
}

// List implements Backend. Like Get, it reports only durable state: when a
// change of a name it looked at (listed or not) is not durable yet, it
// answers once every change made so far is.
func (e *Engine) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	if err := e.lockOpen(storekit.ValidatePrefix(prefix)); err != nil {
		return nil, err
	}
	now := e.now()
	out := []leasehold.Record{}
	pending := false
	for name, ent := range e.leases {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if ent.live(now) {
			out = append(out, ent.record(now))
		}
		pending = pending || ent.pending.Load() > 0
	}
	if err := e.unlockDurable(pending); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// unlockDurable unlocks e, and if pending (a change read under the lock is
// not durable yet) waits for one barrier after every record appended so
// far, so that a read reports only durable state (List, ListPage).
func (e *Engine) unlockDurable(pending bool) error {
	ch := make(chan error, 1)
	if pending {
		e.commit(nil, encodeNop(), func(err error) { ch <- err })
	} else {
		ch <- nil
	}
	e.unlock()
	return <-ch
}

// Waiters implements Backend.
func (e *Engine) Waiters(name string) []Waiter {
	e.lock()
	defer e.unlock()
	ent := e.leases[name]
	pw := e.permitWaiters(name)
	if ent == nil && len(pw) == 0 {
		return nil
	}
	now := e.now()
	out := make([]Waiter, 0, len(ent.queue())+len(pw))
	for _, w := range ent.queue() {
		out = append(out, waiterOf(w, now))
	}
	// A permit's own waiters come first (see free), then its semaphore's
	// that may take it.
	for _, w := range pw {
		out = append(out, waiterOf(w, now))
	}
	return out
}

// Subscribe implements Backend.
func (e *Engine) Subscribe(ctx context.Context, prefix string) <-chan Event {
	return e.hub.subscribe(ctx, prefix)
}

// Recent implements Backend.
func (e *Engine) Recent(n int) []Event { return e.hub.recent(n) }

// ErrLogBroken is Ready's answer once a write or sync of the engine's log
// has failed (a full or failing disk): from then on every change is
// refused, so the server must not be sent traffic; restart it once the
// cause is mended (the server's log names it).
var ErrLogBroken = errors.New("the server's log failed (a write or sync to its data directory; the server's log says why): every change is refused; restart it once that is mended")

// Ready implements Backend: not once the log is broken (ErrLogBroken).
func (e *Engine) Ready(ctx context.Context) error {
	e.lock()
	defer e.unlock()
	if e.closed {
		return leasehold.ErrClosed
	}
	if e.log != nil && e.log.Err() != nil {
		return ErrLogBroken
	}
	return nil
}

// Stats implements Backend.
func (e *Engine) Stats() Stats {
	e.lock()
	defer e.unlock()
	return Stats{Held: e.held, Waiters: e.waiters, Sessions: len(e.sessions), Durable: e.log != nil && !e.cfg.NoSync}
}
