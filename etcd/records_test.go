package etcd_test

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storetest"
	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestRecordsBasics covers what is particular to the etcd records: the key
// layout, versions that are revisions (never reused after a delete), and
// the read-and-compare adds.
func TestRecordsBasics(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	s := open(t, freshURL(t, enginetest.EtcdURL(t)))
	defer s.Close()
	kv := s.Client()

	v1, err := s.PutRecord(ctx, "a", []byte("x"), 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kv.Get(ctx, s.Prefix()+"r/a")
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "x" || uint64(got.Kvs[0].ModRevision) != v1 {
		t.Fatalf("stored key: %v, %v", got, err)
	}
	var ce *leasehold.ConflictError
	if _, err := s.PutRecord(ctx, "a", []byte("y"), 0); !errors.As(err, &ce) || ce.Actual != v1 {
		t.Fatalf("create of an existing record: %v", err)
	}
	if _, err := s.PutRecord(ctx, "a", []byte("y"), math.MaxUint64); !errors.As(err, &ce) || ce.Actual != v1 {
		t.Fatalf("put with an impossible version: %v", err)
	}
	v2, err := s.PutRecord(ctx, "a", nil, v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("put: %d, %v", v2, err)
	}
	if r, err := s.GetRecord(ctx, "a"); err != nil || len(r.Value) != 0 || r.Version != v2 {
		t.Fatalf("get: %+v, %v", r, err)
	}
	if err := s.DeleteRecord(ctx, "a", 0); !errors.As(err, &ce) || ce.Actual != v2 {
		t.Fatalf("delete expecting absent: %v", err)
	}
	if err := s.DeleteRecord(ctx, "a", v2); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{0, v2, math.MaxUint64} {
		if err := s.DeleteRecord(ctx, "a", v); !errors.Is(err, leasehold.ErrNotFound) {
			t.Fatalf("delete (%d) of an absent record: %v", v, err)
		}
	}
	if v3, err := s.PutRecord(ctx, "a", []byte("z"), 0); err != nil || v3 <= v2 {
		t.Fatalf("re-create: %d, %v", v3, err)
	}

	// A counter written by hand in a form ParseCounter reads.
	if _, err := kv.Put(ctx, s.Prefix()+"r/c", "+41"); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.AddCounter(ctx, "c", 1); err != nil || n != 42 {
		t.Fatalf("add: %d, %v", n, err)
	}
	if _, err := kv.Put(ctx, s.Prefix()+"r/c", strconv.FormatInt(math.MaxInt64, 10)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddCounter(ctx, "c", 1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("overflow: %v", err)
	}
	// In a Txn, a failed condition wins over an add that would fail.
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: "a", Version: 1}}, Then: []leasehold.Write{{Key: "c", Add: 1}}})
	if !errors.As(err, &ce) || ce.Key != "a" {
		t.Fatalf("txn with a failed condition and an overflowing add: %v", err)
	}
	_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "c", Add: 1}, {Key: "n", Value: []byte("v")}}})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("txn with an overflowing add: %v", err)
	}
	if _, err := s.GetRecord(ctx, "n"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("a refused txn wrote: %v", err)
	}

	// Leases and records do not see each other.
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "a", Owner: "o", TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 1 {
		t.Fatalf("List: %v, %v", recs, err)
	}
	if r, err := s.GetRecord(ctx, "a"); err != nil || string(r.Value) != "z" {
		t.Fatalf("record beside a lease: %+v, %v", r, err)
	}
	all, err := kv.Get(ctx, s.Prefix()+"r/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil || all.Count != 2 {
		t.Fatalf("record keys: %v, %v", all, err)
	}
}

// TestRecordsContendedAdds: adds that keep colliding (their compare fails
// when another add lands between the read and the write) all apply, once
// each, whether alone or in a Txn.
func TestRecordsContendedAdds(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	u := freshURL(t, enginetest.EtcdURL(t))
	s := open(t, u)
	defer s.Close()
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var err error
				if (w+i)%2 == 0 {
					_, _, err = s.AddCounter(ctx, "hits", 1)
				} else {
					_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{
						{Key: "hits", Add: 1}, {Key: "log/" + strconv.Itoa(w), Add: 1},
					}})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := s.GetRecord(ctx, "hits")
	if err != nil || string(r.Value) != strconv.Itoa(workers*each) {
		t.Fatalf("hits = %q, %v; want %d", r.Value, err, workers*each)
	}
}

func TestRecordsConformance(t *testing.T) {
	u := freshURL(t, enginetest.EtcdURL(t))
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore { return open(t, u) },
		Txn:  true,
	})
}
