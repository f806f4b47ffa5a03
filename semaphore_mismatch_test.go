package leasehold_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/sqlite"
)

// mismatchStores are the stores the semaphore mismatch checks run on.
func mismatchStores(t *testing.T) map[string]leasehold.Store {
	sq, err := sqlite.Open(filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := memory.New()
	t.Cleanup(func() { sq.Close(); m.Close() })
	return map[string]leasehold.Store{"memory": m, "sqlite": sq}
}

// TestSemaphorePermitMismatch (issue 29, item 8): a semaphore asked for
// with another N than its live holders recorded is refused with a
// *MismatchError and keeps nothing (it took a third permit of a "2 of 2"
// semaphore); so is a semaphore on a name held as a plain lease. Once no
// permit is held, another N may be used. Holders and Lease.Data show the
// caller's data without the record of N.
func TestSemaphorePermitMismatch(t *testing.T) {
	for kind, s := range mismatchStores(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			a, _ := leasehold.New(s, leasehold.WithOwner("a"))
			b, _ := leasehold.New(s, leasehold.WithOwner("b"))
			sem2, _ := a.Semaphore("pool", 2)
			var held []*leasehold.Lease
			for i := 0; i < 2; i++ {
				l, err := sem2.TryAcquire(ctx, leasehold.TTL(time.Minute), leasehold.Data([]byte("mine")))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(l.Data(), []byte("mine")) {
					t.Errorf("Lease.Data = %q, want the caller's", l.Data())
				}
				held = append(held, l)
			}
			sem3, _ := b.Semaphore("pool", 3)
			_, err := sem3.TryAcquire(ctx, leasehold.TTL(time.Minute))
			var me *leasehold.MismatchError
			if !errors.As(err, &me) || !errors.Is(err, leasehold.ErrMismatch) || !errors.Is(err, leasehold.ErrInvalid) ||
				!strings.Contains(err.Error(), "a semaphore of 2 permits (recorded by a, holder of pool/permit/") {
				t.Fatalf("N=3 while 2 of 2 are held: %v, want a *MismatchError", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = sem3.Acquire(wctx, leasehold.TTL(time.Minute))
			cancel()
			if !errors.Is(err, leasehold.ErrMismatch) {
				t.Fatalf("Acquire with N=3: %v, want a mismatch at once", err)
			}
			hs, err := sem2.Holders(ctx)
			if err != nil || len(hs) != 2 {
				t.Fatalf("after the refusals: %d holders (%v), want the 2 of N=2", len(hs), err)
			}
			for _, h := range hs {
				if h.Owner != "a" || string(h.Data) != "mine" {
					t.Errorf("holder %+v: want a's, with its own data", h)
				}
			}
			raw, err := s.Get(ctx, hs[0].Name)
			if n, rest, ok := leasehold.PermitCount(raw.Data); err != nil || !ok || n != 2 || string(rest) != "mine" {
				t.Errorf("the permit's record: %q (%v), want N=2 recorded", raw.Data, err)
			}
			// A smaller N is refused as well.
			sem1, _ := b.Semaphore("pool", 1)
			if _, err := sem1.TryAcquire(ctx); !errors.Is(err, leasehold.ErrMismatch) && !errors.Is(err, leasehold.ErrNoPermit) {
				t.Errorf("N=1 while N=2 holders live: %v", err)
			}
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			l, err := sem3.TryAcquire(ctx, leasehold.TTL(time.Minute))
			if err != nil {
				t.Fatalf("N=3 once no permit is held: %v", err)
			}
			defer l.Release(ctx)

			// A lock named like the semaphore: the semaphore is refused.
			lock, err := a.TryAcquire(ctx, "locked", leasehold.TTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Release(ctx)
			semL, _ := b.Semaphore("locked", 2)
			if _, err := semL.TryAcquire(ctx); !errors.Is(err, leasehold.ErrMismatch) || !strings.Contains(err.Error(), "held as a plain lease (a lock) by a") {
				t.Fatalf("a semaphore on a locked name: %v, want a mismatch", err)
			}
			if hs, err := semL.Holders(ctx); err != nil || len(hs) != 0 {
				t.Errorf("the refused semaphore holds %d permits (%v)", len(hs), err)
			}
		})
	}
}

// TestSemaphoreDataBound: the record of N takes room in the data, and a
// caller's data that no longer fits is refused before anything is taken.
func TestSemaphoreDataBound(t *testing.T) {
	s := memory.New()
	defer s.Close()
	c, _ := leasehold.New(s)
	sem, _ := c.Semaphore("pool", 2)
	if _, err := sem.TryAcquire(context.Background(), leasehold.Data(make([]byte, leasehold.MaxDataLen))); !errors.Is(err, leasehold.ErrInvalid) ||
		!strings.Contains(err.Error(), "too long for a permit") {
		t.Fatalf("MaxDataLen bytes of data on a permit: %v", err)
	}
	if recs, _ := s.List(context.Background(), ""); len(recs) != 0 {
		t.Errorf("refused data took %d leases", len(recs))
	}
	for _, c := range []struct {
		in   string
		n    int
		rest string
		ok   bool
	}{
		{"leasehold-permits=3\nx", 3, "x", true},
		{"leasehold-permits=3\n", 3, "", true},
		{"leasehold-permits=03\nx", 0, "leasehold-permits=03\nx", false},
		{"leasehold-permits=0\n", 0, "leasehold-permits=0\n", false},
		{"leasehold-permits=3", 0, "leasehold-permits=3", false},
		{"other", 0, "other", false},
	} {
		n, rest, ok := leasehold.PermitCount([]byte(c.in))
		if n != c.n || string(rest) != c.rest || ok != c.ok {
			t.Errorf("PermitCount(%q) = %d, %q, %v", c.in, n, rest, ok)
		}
	}
}

// TestSemaphoreRetryGetsItsOwnPermit (the red team of 2026-12-07, on the
// Python client, which shared the flaw): an acquire retried with its
// request id after a lost answer was granted another free permit, so one
// acquire held two until the first's TTL. The retry gets the first back;
// another acquire of the same client gets another permit.
func TestSemaphoreRetryGetsItsOwnPermit(t *testing.T) {
	for kind, s := range mismatchStores(t) {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			a, _ := leasehold.New(s, leasehold.WithOwner("a"))
			sem, _ := a.Semaphore("retried", 8)
			lost, err := sem.TryAcquire(ctx, leasehold.RequestID("r1"), leasehold.NoKeepalive())
			if err != nil {
				t.Fatal(err)
			}
			for _, acquire := range []func(context.Context, ...leasehold.AcquireOption) (*leasehold.Lease, error){sem.TryAcquire, sem.Acquire} {
				again, err := acquire(ctx, leasehold.RequestID("r1"), leasehold.NoKeepalive())
				if err != nil {
					t.Fatal(err)
				}
				if again.Name() != lost.Name() || again.Token() != lost.Token() {
					t.Fatalf("the retry got %s (token %d), want the lost grant %s (token %d)", again.Name(), again.Token(), lost.Name(), lost.Token())
				}
			}
			other, err := sem.TryAcquire(ctx, leasehold.RequestID("r2"), leasehold.NoKeepalive())
			if err != nil {
				t.Fatal(err)
			}
			if other.Name() == lost.Name() {
				t.Fatalf("another acquire of the same client got the same permit %s", other.Name())
			}
			holders, err := sem.Holders(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(holders) != 2 {
				t.Fatalf("%d permits held, want 2 (r1's and r2's): %+v", len(holders), holders)
			}
		})
	}
}
