package storetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
)

// endsUnheard is a store that, like etcd's, ends a grant whose answer was
// lost: every fifth new grant of a TryAcquire is left held for a moment
// (others may see it), released, and answered with an error.
type endsUnheard struct {
	leasehold.Store
	n atomic.Int64
}

func (s *endsUnheard) TryAcquire(ctx context.Context, req leasehold.AcquireRequest) (leasehold.Record, error) {
	before, _ := s.Store.Get(ctx, req.Name)
	rec, err := s.Store.TryAcquire(ctx, req)
	if err != nil || rec.Token == before.Token || s.n.Add(1)%5 != 0 {
		return rec, err // only new grants: a retry's is its caller's already
	}
	time.Sleep(40 * time.Millisecond)
	if err := s.Store.Release(ctx, req.Name, req.Owner, rec.Token); err != nil && !errors.Is(err, leasehold.ErrNotHeld) {
		return leasehold.Record{}, err
	}
	return leasehold.Record{}, errors.New("the answer was lost")
}

// TestEndsUnheardChecked: with EndsUnheard, a store that ends the grants
// of acquires whose answer was lost passes the linearizability check.
// CI run 119 of 2026-12-07: etcd's conformance (etcd does this) found one
// history illegal under a busy loop, its one indeterminate acquire seen
// held and followed by another grant well within its TTL; the workload
// recorded it as a plain acquire, which may not end early.
func TestEndsUnheardChecked(t *testing.T) {
	store := &endsUnheard{Store: memory.New()}
	res := CheckHistories(context.Background(), store, HistoryConfig{
		Histories: 100, Parallel: 20, Seed: 7,
		TTLs:        []time.Duration{200 * time.Millisecond, 300 * time.Millisecond},
		EndsUnheard: true,
	})
	t.Log(res)
	if res.Unknown == 0 {
		t.Fatalf("no acquire failed: the test checks nothing (%v)", res)
	}
	if res.Illegal > 0 || res.Undecided > 0 {
		t.Errorf("a store that ends its unheard grants: %v", res)
	}
}
