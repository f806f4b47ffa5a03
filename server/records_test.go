package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/memory"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/testrig/servertest"
)

func wantConflict(t *testing.T, err error, key string, expected, actual uint64) {
	t.Helper()
	var ce *leasehold.ConflictError
	if !errors.As(err, &ce) || ce.Key != key || ce.Expected != expected || ce.Actual != actual {
		t.Fatalf("got %v, want a conflict on %q expecting %d, finding %d", err, key, expected, actual)
	}
}

func wantInvalid(t *testing.T, err error) {
	t.Helper()
	var inv *leasehold.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("got %v, want an *InvalidError", err)
	}
}

// testRecordBasics runs the record semantics every backend shares.
func testRecordBasics(t *testing.T, rs leasehold.RecordStore) {
	ctx := context.Background()
	if _, err := rs.GetRecord(ctx, "rb/a"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	v1, err := rs.PutRecord(ctx, "rb/a", []byte("one"), 0)
	if err != nil || v1 == 0 {
		t.Fatalf("create: %d %v", v1, err)
	}
	_, err = rs.PutRecord(ctx, "rb/a", []byte("again"), 0)
	wantConflict(t, err, "rb/a", 0, v1)
	v2, err := rs.PutRecord(ctx, "rb/a", []byte("two"), v1)
	if err != nil || v2 <= v1 {
		t.Fatalf("update: %d %v", v2, err)
	}
	_, err = rs.PutRecord(ctx, "rb/a", []byte("stale"), v1)
	wantConflict(t, err, "rb/a", v1, v2)
	got, err := rs.GetRecord(ctx, "rb/a")
	if err != nil || string(got.Value) != "two" || got.Version != v2 || got.Key != "rb/a" {
		t.Fatalf("get: %+v %v", got, err)
	}
	wantConflict(t, rs.DeleteRecord(ctx, "rb/a", v1), "rb/a", v1, v2)
	if err := rs.DeleteRecord(ctx, "rb/a", v2); err != nil {
		t.Fatal(err)
	}
	if err := rs.DeleteRecord(ctx, "rb/a", v2); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	// A key's next life never reuses a version of its last one.
	v3, err := rs.PutRecord(ctx, "rb/a", []byte("three"), 0)
	if err != nil || v3 <= v2 {
		t.Fatalf("recreate: %d %v, want a version above %d", v3, err, v2)
	}

	// Counters.
	n, cv1, err := rs.AddCounter(ctx, "rb/n", 5)
	if err != nil || n != 5 || cv1 == 0 {
		t.Fatalf("add: %d %d %v", n, cv1, err)
	}
	n, cv2, err := rs.AddCounter(ctx, "rb/n", -7)
	if err != nil || n != -2 || cv2 <= cv1 {
		t.Fatalf("add: %d %d %v", n, cv2, err)
	}
	if _, _, err := rs.AddCounter(ctx, "rb/a", 1); err == nil {
		t.Fatal("add to a non-counter succeeded")
	} else {
		wantInvalid(t, err)
	}
	if _, err := rs.PutRecord(ctx, "rb/max", []byte("9223372036854775807"), 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rs.AddCounter(ctx, "rb/max", 1); err == nil {
		t.Fatal("overflow succeeded")
	} else {
		wantInvalid(t, err)
	}

	// Invalid input changes nothing.
	if _, err := rs.PutRecord(ctx, "", []byte("x"), 0); err == nil {
		t.Fatal("empty key accepted")
	} else {
		wantInvalid(t, err)
	}
	if _, err := rs.PutRecord(ctx, "rb/big", make([]byte, leasehold.MaxValueLen+1), 0); err == nil {
		t.Fatal("oversized value accepted")
	} else {
		wantInvalid(t, err)
	}
	if _, err := rs.GetRecord(ctx, "rb/big"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("oversized value was stored: %v", err)
	}
	big, err := rs.PutRecord(ctx, "rb/big", bytes.Repeat([]byte{0, 0xff}, leasehold.MaxValueLen/2), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rs.GetRecord(ctx, "rb/big"); err != nil || got.Version != big || !bytes.Equal(got.Value, bytes.Repeat([]byte{0, 0xff}, leasehold.MaxValueLen/2)) {
		t.Fatalf("largest value did not round-trip: %v", err)
	}

	// Transactions: all or nothing.
	cur, _ := rs.GetRecord(ctx, "rb/a")
	res, err := rs.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: "rb/a", Version: cur.Version}, {Key: "rb/t1", Version: 0}},
		Then: []leasehold.Write{{Key: "rb/t1", Value: []byte("x")}, {Key: "rb/n", Add: 2}, {Key: "rb/a", Delete: true}, {Key: "rb/absent", Delete: true}, {Key: "rb/empty"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Versions["rb/t1"] == 0 || res.Versions["rb/n"] <= cv2 || res.Versions["rb/a"] != 0 || res.Versions["rb/absent"] != 0 || res.Versions["rb/empty"] == 0 || len(res.Versions) != 5 {
		t.Fatalf("txn versions %v", res.Versions)
	}
	if r, err := rs.GetRecord(ctx, "rb/n"); err != nil || string(r.Value) != "0" || r.Version != res.Versions["rb/n"] {
		t.Fatalf("counter after txn: %+v %v", r, err)
	}
	if r, err := rs.GetRecord(ctx, "rb/empty"); err != nil || len(r.Value) != 0 {
		t.Fatalf("empty write: %+v %v", r, err)
	}
	if _, err := rs.GetRecord(ctx, "rb/a"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("txn delete: %v", err)
	}
	t1 := res.Versions["rb/t1"]
	_, err = rs.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: "rb/t1", Version: t1}, {Key: "rb/n", Version: cv2}},
		Then: []leasehold.Write{{Key: "rb/t1", Value: []byte("y")}, {Key: "rb/t2", Value: []byte("z")}},
	})
	wantConflict(t, err, "rb/n", cv2, res.Versions["rb/n"])
	// A failing add fails the whole transaction, after its conditions held.
	_, err = rs.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: "rb/t1", Version: t1}},
		Then: []leasehold.Write{{Key: "rb/t1", Value: []byte("y")}, {Key: "rb/empty", Add: 1}},
	})
	wantInvalid(t, err)
	_, err = rs.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "rb/t1", Value: []byte("y")}, {Key: "rb/t1", Delete: true}}})
	wantInvalid(t, err)
	if r, err := rs.GetRecord(ctx, "rb/t1"); err != nil || string(r.Value) != "x" || r.Version != t1 {
		t.Fatalf("a failed txn changed rb/t1: %+v %v", r, err)
	}
	if _, err := rs.GetRecord(ctx, "rb/t2"); !errors.Is(err, leasehold.ErrNotFound) {
		t.Fatalf("a failed txn wrote rb/t2: %v", err)
	}
}

// A store without records: the proxy says so, clearly.
type pxNoRecords struct{ leasehold.Store }

func TestProxyRecordsUnsupported(t *testing.T) {
	p := pxNew(t, pxNoRecords{memory.New()}, ProxyConfig{})
	if p.SupportsRecords() {
		t.Fatal("SupportsRecords is true without records")
	}
	ctx := context.Background()
	if _, err := p.PutRecord(ctx, "k", []byte("v"), 0); !errors.Is(err, ErrRecordsUnsupported) {
		t.Fatalf("put: %v", err)
	}
	if _, err := p.GetRecord(ctx, "k"); !errors.Is(err, ErrRecordsUnsupported) {
		t.Fatalf("get: %v", err)
	}
	if _, err := p.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "k"}}}); !errors.Is(err, ErrRecordsUnsupported) {
		t.Fatalf("txn: %v", err)
	}
	if _, ok := StoreOf(p).(leasehold.RecordStore); !ok {
		t.Fatal("StoreOf(proxy) is not a RecordStore")
	}
}

// Records survive a restart with their versions, from the log alone and
// from a snapshot plus the log; versions keep increasing after it, and a
// deleted key's next life still starts above its old versions.
func TestEngineRecordsRecover(t *testing.T) {
	for _, snap := range []bool{false, true} {
		t.Run(fmt.Sprint("snapshot=", snap), func(t *testing.T) {
			dir := t.TempDir()
			cfg := EngineConfig{Dir: dir}
			if snap {
				cfg.SnapshotBytes = 16 << 10
			}
			e, err := OpenEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			want := map[string]leasehold.Versioned{}
			var deletedAt uint64
			for i := 0; i < 3000; i++ {
				key := fmt.Sprintf("rec/%d", i%200)
				cur, ok := want[key]
				switch {
				case i%200 == 7 && ok:
					if err := e.DeleteRecord(ctx, key, cur.Version); err != nil {
						t.Fatal(err)
					}
					deletedAt = max(deletedAt, cur.Version)
					delete(want, key)
				case i%3 == 0:
					n, v, err := e.AddCounter(ctx, "rec/counter", 1)
					if err != nil {
						t.Fatal(err)
					}
					want["rec/counter"] = leasehold.Versioned{Key: "rec/counter", Value: []byte(fmt.Sprint(n)), Version: v}
				default:
					val := []byte(strings.Repeat(fmt.Sprint(i), 10))
					v, err := e.PutRecord(ctx, key, val, cur.Version)
					if err != nil {
						t.Fatal(err)
					}
					want[key] = leasehold.Versioned{Key: key, Value: val, Version: v}
				}
			}
			gone := "rec/5"
			if err := e.DeleteRecord(ctx, gone, want[gone].Version); err != nil {
				t.Fatal(err)
			}
			deletedAt = max(deletedAt, want[gone].Version)
			delete(want, gone)
			res, err := e.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: "rec/t1", Value: []byte("a")}, {Key: "rec/t2", Value: []byte("b")}}})
			if err != nil {
				t.Fatal(err)
			}
			want["rec/t1"] = leasehold.Versioned{Key: "rec/t1", Value: []byte("a"), Version: res.Versions["rec/t1"]}
			want["rec/t2"] = leasehold.Versioned{Key: "rec/t2", Value: []byte("b"), Version: res.Versions["rec/t2"]}
			if snap {
				waitSnapshot(t, dir)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := e.GetRecord(ctx, "rec/t1"); !errors.Is(err, leasehold.ErrClosed) {
				t.Fatalf("get after close: %v", err)
			}
			e = openEngine(t, dir)
			defer e.Close()
			for k, w := range want {
				got, err := e.GetRecord(ctx, k)
				if err != nil || got.Version != w.Version || !bytes.Equal(got.Value, w.Value) {
					t.Fatalf("%s recovered as %+v (%v), want %+v", k, got, err, w)
				}
			}
			e.lock()
			n := e.recordCount()
			e.unlock()
			if n != len(want) {
				t.Fatalf("recovered %d records, want %d", n, len(want))
			}
			v, err := e.PutRecord(ctx, "rec/t1", []byte("c"), want["rec/t1"].Version)
			if err != nil || v != want["rec/t1"].Version+1 {
				t.Fatalf("update after recovery: %d %v", v, err)
			}
			v, err = e.PutRecord(ctx, gone, []byte("new life"), 0)
			if err != nil || v <= deletedAt {
				t.Fatalf("create after recovery: version %d (%v), want above %d", v, err, deletedAt)
			}
		})
	}
}

// Many writers on one key: every acknowledged write is one version, none
// lost, none duplicated.
func TestEngineRecordsConcurrent(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			dir := ""
			if durable {
				dir = t.TempDir()
			}
			e := openEngine(t, dir)
			defer e.Close()
			ctx := context.Background()
			const workers, each = 20, 25
			work := func(int) error {
				for range each {
					_, err := leasehold.Update(ctx, e, "conc/n", func(old []byte, exists bool) ([]byte, error) {
						var n int64
						if exists {
							n, _ = storekit.ParseCounter("conc/n", old)
						}
						return []byte(fmt.Sprint(n + 1)), nil
					}, leasehold.UpdateOptions{MaxAttempts: 1000})
					if err != nil {
						return err
					}
					if _, _, err := e.AddCounter(ctx, "conc/c", 1); err != nil {
						return err
					}
				}
				return nil
			}
			servertest.Parallel(t, workers, work)
			if t.Failed() {
				return
			}
			for _, k := range []string{"conc/n", "conc/c"} {
				r, err := e.GetRecord(ctx, k)
				if err != nil || string(r.Value) != fmt.Sprint(workers*each) || r.Version != workers*each {
					t.Fatalf("%s: %q version %d (%v), want %d at version %d", k, r.Value, r.Version, err, workers*each, workers*each)
				}
			}
		})
	}
}
