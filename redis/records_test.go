package redis_test

import (
	"errors"
	"math"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/redis"
	"github.com/leasehold/leasehold/storetest"
)

// TestRecordsBasics covers what is particular to the Redis records: the
// key layout, versions that are never reused after a delete, counters
// written in forms ParseCounter accepts but HINCRBY does not, and a
// transaction whose second add overflows leaving the first undone.
func TestRecordsBasics(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	url, prefix := sharedURL(t), uniquePrefix(t)
	s := open(t, url, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
	defer s.Close()
	opts, _ := goredis.ParseURL(url)
	raw := goredis.NewClient(opts)
	defer raw.Close()

	v1, err := s.PutRecord(ctx, "a{1}", []byte("x"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := raw.HGetAll(ctx, prefix+"rec:a{1}").Result(); got["v"] != "x" || got["n"] == "" {
		t.Fatalf("stored hash %v", got)
	}
	if _, err := s.PutRecord(ctx, "a{1}", []byte("y"), 0); !errors.Is(err, leasehold.ErrConflict) {
		t.Fatalf("create of an existing record: %v", err)
	}
	var ce *leasehold.ConflictError
	if _, err := s.PutRecord(ctx, "a{1}", []byte("y"), v1+1); !errors.As(err, &ce) || ce.Actual != v1 || ce.Expected != v1+1 {
		t.Fatalf("put with a wrong version: %v", err)
	}
	v2, err := s.PutRecord(ctx, "a{1}", nil, v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("put: %d, %v (after %d)", v2, err, v1)
	}
	if r, err := s.GetRecord(ctx, "a{1}"); err != nil || len(r.Value) != 0 || r.Version != v2 {
		t.Fatalf("get of an empty value: %+v, %v", r, err)
	}
	if err := s.DeleteRecord(ctx, "a{1}", v1); !errors.As(err, &ce) || ce.Actual != v2 {
		t.Fatalf("delete with a wrong version: %v", err)
	}
	if err := s.DeleteRecord(ctx, "a{1}", v2); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRecord(ctx, "a{1}", v2); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("delete of an absent record: %v", err)
	}
	if _, err := s.GetRecord(ctx, "a{1}"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	// Created again, the record gets a version above every earlier one.
	v3, err := s.PutRecord(ctx, "a{1}", []byte("z"), 0)
	if err != nil || v3 <= v2 {
		t.Fatalf("re-create: %d, %v (after %d)", v3, err, v2)
	}

	// Counters: created at 0; values that ParseCounter reads count.
	if n, _, err := s.AddCounter(ctx, "c", 5); err != nil || n != 5 {
		t.Fatalf("add to an absent counter: %d, %v", n, err)
	}
	for in, want := range map[string]int64{"+7": 8, "007": 8, "-0": 1, "-12": -11} {
		if _, err := raw.HSet(ctx, prefix+"rec:c", "v", in).Result(); err != nil {
			t.Fatal(err)
		}
		if n, _, err := s.AddCounter(ctx, "c", 1); err != nil || n != want {
			t.Errorf("add 1 to %q: %d, %v; want %d", in, n, err, want)
		}
	}
	for _, bad := range []string{"", "x", "1.5", " 1", "9223372036854775808", "--1", "1_000"} {
		raw.HSet(ctx, prefix+"rec:c", "v", bad)
		r0, _ := s.GetRecord(ctx, "c")
		if _, _, err := s.AddCounter(ctx, "c", 1); !errors.Is(err, leasehold.ErrInvalid) {
			t.Errorf("add to %q: %v, want ErrInvalid", bad, err)
		}
		if r1, _ := s.GetRecord(ctx, "c"); string(r1.Value) != bad || r1.Version != r0.Version {
			t.Errorf("a refused add changed %+v to %+v", r0, r1)
		}
	}
	raw.HSet(ctx, prefix+"rec:c", "v", "9223372036854775800")
	if n, _, err := s.AddCounter(ctx, "c", 7); err != nil || n != math.MaxInt64 {
		t.Fatalf("add up to MaxInt64: %d, %v", n, err)
	}
	if _, _, err := s.AddCounter(ctx, "c", 1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("overflow: %v", err)
	}
	if _, _, err := s.AddCounter(ctx, "d", math.MinInt64); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddCounter(ctx, "d", -1); !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("underflow: %v", err)
	}

	// A transaction whose second add overflows changes nothing, not even
	// the first add or a non-canonical value it rewrote.
	raw.HSet(ctx, prefix+"rec:e", "v", "+3", "n", "1")
	before, _ := s.GetRecord(ctx, "e")
	_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{
		{Key: "e", Add: 1}, {Key: "new", Value: []byte("v")}, {Key: "c", Add: 1},
	}})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("txn with an overflowing add: %v", err)
	}
	if after, _ := s.GetRecord(ctx, "e"); string(after.Value) != "+3" || after.Version != before.Version {
		t.Fatalf("the refused txn changed %+v to %+v", before, after)
	}
	if _, err := s.GetRecord(ctx, "new"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("the refused txn wrote: %v", err)
	}
	// Leases and records do not see each other.
	if _, err := s.TryAcquire(ctx, leasehold.AcquireRequest{Name: "a{1}", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetRecord(ctx, "a{1}"); err != nil || string(r.Value) != "z" {
		t.Fatalf("record beside a lease of the same name: %+v, %v", r, err)
	}
	if recs, err := s.List(ctx, ""); err != nil || len(recs) != 1 {
		t.Fatalf("List sees %v, %v; want the one lease", recs, err)
	}
}

// TestRecordsClusterSlots: on Redis Cluster a transaction must keep its
// keys in one slot; a hash tag does that.
func TestRecordsClusterSlots(t *testing.T) {
	cc := startCluster(t)
	s, err := redis.New(cc, redis.WithKeyPrefix(uniquePrefix(t)), redis.WithHoldback(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := ctxT(t, time.Minute)
	_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "order:1", Value: []byte("x")}, {Key: "balance:1", Add: 5}}})
	if !errors.Is(err, leasehold.ErrInvalid) {
		t.Fatalf("txn across slots: %v, want ErrInvalid", err)
	}
	res, err := s.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: "order:{1}", Version: 0}},
		Then: []leasehold.Write{{Key: "order:{1}", Value: []byte("x")}, {Key: "balance:{1}", Add: 5}},
	})
	if err != nil || res.Versions["order:{1}"] == 0 || res.Versions["balance:{1}"] == 0 {
		t.Fatalf("txn in one slot: %+v, %v", res, err)
	}
	if n, _, err := s.AddCounter(ctx, "balance:{1}", -2); err != nil || n != 3 {
		t.Fatalf("balance: %d, %v", n, err)
	}
	// Single-key operations on keys in many slots are linearizable too.
	h := storetest.CheckRecordHistories(ctx, s, storetest.RecordHistoryConfig{Histories: 20, Prefix: "cluster/"})
	t.Logf("linearizability: %s", h)
	if !h.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", h, h.FirstBad)
	}
}

func TestRecordsConformance(t *testing.T) {
	url, prefix := sharedURL(t), uniquePrefix(t)
	storetest.RunRecords(t, storetest.RecordsHarness{
		Open: func(t testing.TB) leasehold.RecordStore {
			return open(t, url, redis.WithKeyPrefix(prefix), redis.WithHoldback(0))
		},
		Txn: true,
	})
}
