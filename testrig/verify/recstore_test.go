package verify

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/redis"
)

// The recorder finds an undone grant by this method: renaming it must
// not silently bring back the indeterminate recording.
var _ undoneGrant = (*redis.UndoneError)(nil)

// undoingStore does to owner "a"'s TryAcquire what the Redis store does to
// a grant its script made across a reconnect to a restarted server: the
// grant is made, seen (meanwhile runs), released, and the call answers
// with a *redis.UndoneError.
type undoingStore struct {
	leasehold.Store
	meanwhile func()
}

func (u undoingStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	rec, err := u.Store.TryAcquire(ctx, req)
	if err != nil || req.Owner != "a" {
		return rec, err
	}
	u.meanwhile()
	rerr := u.Store.Release(ctx, req.Name, req.Owner, rec.Token)
	return leasehold.Record{}, &redis.UndoneError{Token: rec.Token, Released: rerr == nil,
		Err: &leasehold.HeldError{Name: req.Name, Owner: redis.HoldbackOwner, Remaining: time.Millisecond}}
}

// TestRecordsUndoneGrant: a grant undone inside its call is recorded as
// an "undone" operation (nothing, or a grant freed again by the call's
// return), so that another caller's refusal naming it and the next grant
// make a legal history. Recorded as an indeterminate acquire (as before),
// the grant seemed to last its TTL and R9 on Redis judged a legal run
// illegal.
func TestRecordsUndoneGrant(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	h, rec := recorder()
	b, c := rec(mem, "wb"), rec(mem, "wc")
	var seen error
	a := rec(undoingStore{Store: mem, meanwhile: func() {
		_, seen = b.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "b", TTL: time.Minute})
	}}, "wa")

	_, err := a.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "a", TTL: time.Minute})
	var he *leasehold.HeldError
	if !errors.As(err, &he) || he.Owner != redis.HoldbackOwner {
		t.Fatalf("a's acquire: %v, want the hold-back refusal", err)
	}
	if !errors.As(seen, &he) || he.Owner != "a" {
		t.Fatalf("b's acquire during a's: %v, want held by a", seen)
	}
	if _, err := c.TryAcquire(ctx, leasehold.AcquireRequest{Name: "x", Owner: "c", TTL: time.Minute}); err != nil {
		t.Fatalf("c's acquire after the undo: %v", err)
	}

	ops := h.LeaseOps()["x"]
	kinds := map[string]int{}
	for _, op := range ops {
		if op.Unknown {
			t.Errorf("%s by %s recorded as indeterminate", op.Kind, op.Owner)
		}
		kinds[op.Kind+" "+op.Owner]++
	}
	if kinds["undone a"] != 1 || len(ops) != 3 {
		t.Errorf("recorded %v, want a's undone acquire besides b's and c's acquires", kinds)
	}
	if res := Check(h, CheckOptions{}); !res.Passed() || res.Checker() != "ok" || res.Grants != 1 {
		t.Errorf("legal history judged %s (want ok, c's one grant): %s", res.Checker(), res)
	}
}

// TestUndoneAfterLoss: on a Redis that lost writes in a restart but kept
// its restart marker (an RDB snapshot), a grant made on the stale marker
// may break the rules the store undoes it for: a token at or below one
// granted before the loss, or a grant while the lost holder may still
// hold. Undone, it is legal history (the "nothing happened" outcome),
// not a token regression or a second holder.
func TestUndoneAfterLoss(t *testing.T) {
	for _, tok := range []uint64{97, 101} {
		ctx := context.Background()
		h, rec := recorder()
		mem := memory.New()
		x := rec(mem, "wx")
		if _, err := x.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "x", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		killed := Mono()
		up := killed + int64(time.Millisecond)
		h.Events = append(h.Events,
			Event{E: "call", Worker: "restart", Seq: 1, Proc: "r", Key: "k", Op: "lose", T: killed},
			Event{E: "ret", Worker: "restart", Seq: 1, Proc: "r", Key: "k", Op: "lose", OK: true, T: up})
		a := rec(undoneStore{tok}, "wa")
		time.Sleep(2 * time.Millisecond)
		if _, err := a.TryAcquire(ctx, leasehold.AcquireRequest{Name: "k", Owner: "a", TTL: time.Minute}); err == nil {
			t.Fatal("undoneStore granted")
		}
		if res := Check(h, CheckOptions{}); !res.Passed() || res.Checker() != "ok" {
			t.Errorf("grant of token %d undone after a loss, judged %s: %s", tok, res.Checker(), res)
		}
		mem.Close()
	}
}

// undoneStore answers every TryAcquire with an undone grant of token tok.
type undoneStore struct{ tok uint64 }

func (u undoneStore) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	return leasehold.Record{}, &redis.UndoneError{Token: u.tok, Released: true,
		Err: &leasehold.HeldError{Name: req.Name, Owner: redis.HoldbackOwner, Remaining: time.Millisecond}}
}
func (undoneStore) Renew(context.Context, string, string, uint64, time.Duration) error { return nil }
func (undoneStore) Release(context.Context, string, string, uint64) error              { return nil }
func (undoneStore) Get(context.Context, string) (leasehold.Record, error) {
	return leasehold.Record{}, leasehold.ErrNotFound
}
func (undoneStore) List(context.Context, string) ([]leasehold.Record, error) { return nil, nil }
func (undoneStore) Close() error                                             { return nil }

// recorder returns a history and a maker of recording stores that write
// to it.
func recorder() (*History, func(inner leasehold.Store, worker string) *recStore) {
	var mu sync.Mutex
	h := &History{}
	emit := func(ev Event) { mu.Lock(); h.Events = append(h.Events, ev); mu.Unlock() }
	seq := new(atomic.Int64)
	return h, func(inner leasehold.Store, worker string) *recStore {
		return newRecStore(inner, emit, worker, "p", seq)
	}
}
