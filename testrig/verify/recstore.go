package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold"
)

// emitter writes events; the worker's goes to standard output.
type emitter func(Event)

// recStore is a leasehold.Store that records every TryAcquire, Renew and
// Release it passes on, including the ones a Client's keepalive makes. It
// deliberately implements only Store (not Watcher or Queuer), so a Client
// in front of it polls with TryAcquire and every grant is a recorded call.
//
// One recStore serves one logical process. After an indeterminate result
// the process is retired: later operations are recorded under a new
// process id, as Jepsen does.
type recStore struct {
	inner  leasehold.Store
	emit   emitter
	worker string
	base   string
	seq    *atomic.Int64

	mu  sync.Mutex
	gen int
}

func newRecStore(inner leasehold.Store, emit emitter, worker, base string, seq *atomic.Int64) *recStore {
	return &recStore{inner: inner, emit: emit, worker: worker, base: base, seq: seq}
}

func (r *recStore) proc() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprintf("%s.%d", r.base, r.gen)
}

func (r *recStore) retire() {
	r.mu.Lock()
	r.gen++
	r.mu.Unlock()
}

func (r *recStore) call(ev Event) (Event, func(Event)) {
	ev.E, ev.Worker, ev.Seq, ev.Proc = "call", r.worker, r.seq.Add(1), r.proc()
	ev.T = Mono()
	r.emit(ev)
	return ev, func(ret Event) {
		ret.E, ret.Worker, ret.Seq, ret.Proc, ret.Key, ret.Op = "ret", ev.Worker, ev.Seq, ev.Proc, ev.Key, ev.Op
		ret.T = Mono()
		r.emit(ret)
		if ret.Unk {
			r.retire()
		}
	}
}

func (r *recStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	_, done := r.call(Event{Key: req.Name, Op: "acquire", Owner: req.Owner, ReqID: req.RequestID, TTL: int64(req.TTL)})
	rec, err := r.inner.TryAcquire(ctx, req)
	var held *leasehold.HeldError
	var undone undoneGrant
	switch {
	case err == nil:
		done(Event{OK: true, Out: rec.Token})
	case errors.As(err, &undone):
		// The store granted the lease and undid that grant before
		// returning (the Redis store's grant made across a reconnect to a
		// restarted server, on facts the restart had changed): another
		// caller may have seen it held. The model takes such a call as
		// nothing, or a grant freed again by its return (storetest's
		// "undone"); not as a grant that stood, since it may have broken
		// the rules the store undid it for (a token below the floor, a
		// grant inside a hold-back).
		token, _ := undone.UndoneGrant()
		done(Event{Undone: true, Out: token})
	case errors.As(err, &held) && held.Token != 0:
		done(Event{Out: held.Token, Holder: held.Owner})
	default:
		// Also a refusal that names no holder (token 0: the Redis store
		// holding back after a restart, possibly having undone a grant):
		// the model checks a "held" answer against the holder it names,
		// so such an answer is recorded as indeterminate.
		done(Event{Unk: true, Msg: err.Error()})
	}
	return rec, err
}

// undoneGrant is an acquire's error that says the store made a grant and
// took it back before returning (redis.UndoneError).
type undoneGrant interface {
	error
	UndoneGrant() (token uint64, released bool)
}

func (r *recStore) Renew(ctx context.Context, name, owner string, token uint64, ttl time.Duration) error {
	_, done := r.call(Event{Key: name, Op: "renew", Owner: owner, Token: token, TTL: int64(ttl)})
	err := r.inner.Renew(ctx, name, owner, token, ttl)
	r.definite(done, err)
	return err
}

func (r *recStore) Release(ctx context.Context, name, owner string, token uint64) error {
	_, done := r.call(Event{Key: name, Op: "release", Owner: owner, Token: token})
	err := r.inner.Release(ctx, name, owner, token)
	r.definite(done, err)
	return err
}

func (r *recStore) definite(done func(Event), err error) {
	switch {
	case err == nil:
		done(Event{OK: true})
	case errors.Is(err, leasehold.ErrNotHeld):
		done(Event{})
	default:
		done(Event{Unk: true, Msg: err.Error()})
	}
}

func (r *recStore) Get(ctx context.Context, name string) (leasehold.Record, error) {
	return r.inner.Get(ctx, name)
}

func (r *recStore) List(ctx context.Context, prefix string) ([]leasehold.Record, error) {
	return r.inner.List(ctx, prefix)
}

// Close does not close the shared inner store.
func (r *recStore) Close() error { return nil }
