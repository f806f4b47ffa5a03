package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// RecordsHarness tells the records suite how to get at a store.
//
//	func TestRecords(t *testing.T) {
//		storetest.RunRecords(t, storetest.RecordsHarness{
//			Open: func(t testing.TB) leasehold.RecordStore { return openMyStore(t) },
//			Txn:  true,
//		})
//	}
//
// Each subtest uses keys of its own (prefixed with the test's name and a
// timestamp), so Open may return the same backing store each time.
type RecordsHarness struct {
	// Open returns a ready store. If it implements io.Closer the suite
	// closes it when the subtest ends, so Open returns a handle of its own
	// each time (on a shared backing store if it likes). Required.
	Open func(t testing.TB) leasehold.RecordStore
	// Txn says the store has multi-key transactions. When false, the suite
	// expects Txn to return leasehold.ErrTxnUnsupported and change nothing.
	Txn bool
	// ActualUnknown says the store cannot always report the version it
	// found in a *ConflictError: Actual may then be 0. When false, Actual
	// must be the version found (0 only when the key was absent), and the
	// linearizability check holds the store to it.
	ActualUnknown bool
	// Histories overrides the linearizability workload (zero: defaults).
	Histories RecordHistoryConfig
}

func (h RecordsHarness) open(t *testing.T) leasehold.RecordStore {
	t.Helper()
	s := h.Open(t)
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return s
}

// RunRecords runs the records conformance suite.
func RunRecords(t *testing.T, h RecordsHarness) {
	if h.Open == nil {
		t.Fatal("storetest: RecordsHarness.Open is required")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, RecordsHarness)
	}{
		{"GetAbsent", testRecGetAbsent},
		{"CreateOnly", testRecCreateOnly},
		{"CreateRace", testRecCreateRace},
		{"ValueRoundTrip", testRecValueRoundTrip},
		{"PutVersion", testRecPutVersion},
		{"VersionsIncrease", testRecVersionsIncrease},
		{"Delete", testRecDelete},
		{"AddCounter", testRecAddCounter},
		{"AddCounterConcurrent", testRecAddConcurrent},
		{"Update", testRecUpdate},
		{"UpdateConcurrent", testRecUpdateConcurrent},
		{"Txn", testRecTxn},
		{"TxnInvalid", testRecTxnInvalid},
		{"TxnTransfers", testRecTxnTransfers},
		{"InvalidInput", testRecInvalidInput},
		{"Cancellation", testRecCancellation},
		{"Deadline", testRecDeadline},
		{"SeparateFromLeases", testRecSeparateFromLeases},
		{"Linearizable", testRecLinearizable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// start opens the store for a test, with the test's context and a key
// prefix of its own.
func (h RecordsHarness) start(t *testing.T) (leasehold.RecordStore, context.Context, string) {
	t.Helper()
	return h.open(t), bg(t), rprefix(t)
}

// rprefix is a key prefix of the test's own.
func rprefix(t *testing.T) string {
	return fmt.Sprintf("rec/%s/%d/", t.Name(), time.Now().UnixNano())
}

func mustPut(t *testing.T, s leasehold.RecordStore, key string, value []byte, expect uint64) uint64 {
	t.Helper()
	v, err := s.PutRecord(bg(t), key, value, expect)
	if err != nil {
		t.Fatalf("PutRecord(%q, expect %d): %v", key, expect, err)
	}
	if v == 0 {
		t.Fatalf("PutRecord(%q, expect %d) returned version 0", key, expect)
	}
	return v
}

func mustGet(t *testing.T, s leasehold.RecordStore, key string) leasehold.Versioned {
	t.Helper()
	r, err := s.GetRecord(bg(t), key)
	if err != nil {
		t.Fatalf("GetRecord(%q): %v", key, err)
	}
	if r.Key != key || r.Version == 0 {
		t.Fatalf("GetRecord(%q) = key %q version %d", key, r.Key, r.Version)
	}
	return r
}

// expectRecord checks that key holds value at version.
func expectRecord(t *testing.T, s leasehold.RecordStore, key string, value []byte, version uint64) {
	t.Helper()
	r, err := s.GetRecord(bg(t), key)
	if err != nil || !bytes.Equal(r.Value, value) || r.Version != version {
		t.Errorf("GetRecord(%q) = %q version %d, %v; want %q version %d", key, r.Value, r.Version, err, value, version)
	}
}

func expectAbsent(t *testing.T, s leasehold.RecordStore, key string) {
	t.Helper()
	if r, err := s.GetRecord(bg(t), key); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("GetRecord(%q) = %q version %d, %v; want ErrNotFound", key, r.Value, r.Version, err)
	}
}

// expectConflict checks err is a *ConflictError naming key, expected and
// actual (which a store with ActualUnknown may leave 0).
func expectConflict(t *testing.T, h RecordsHarness, err error, key string, expected, actual uint64) {
	t.Helper()
	var ce *leasehold.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, leasehold.ErrConflict) {
		t.Errorf("got %v, want a *ConflictError", err)
		return
	}
	if ce.Key != key || ce.Expected != expected {
		t.Errorf("ConflictError names %q expected %d; want %q expected %d", ce.Key, ce.Expected, key, expected)
	}
	if ce.Actual != actual && !(h.ActualUnknown && ce.Actual == 0) {
		t.Errorf("ConflictError for %q: actual %d, want %d", key, ce.Actual, actual)
	}
}

func expectInvalid(t *testing.T, what string, err error) {
	t.Helper()
	var ie *leasehold.InvalidError
	if !errors.Is(err, leasehold.ErrInvalid) || !errors.As(err, &ie) || ie.Reason == "" {
		t.Errorf("%s: got %v, want an *InvalidError", what, err)
	}
}

func counter(n int64) []byte { return []byte(strconv.FormatInt(n, 10)) }

func testRecGetAbsent(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	p := rprefix(t)
	expectAbsent(t, s, p+"never")
	v := mustPut(t, s, p+"x", []byte("1"), 0)
	expectRecord(t, s, p+"x", []byte("1"), v)
	// Keys are compared byte for byte: no prefix matches, no normalisation.
	expectAbsent(t, s, p+"x/")
	expectAbsent(t, s, p)
	expectAbsent(t, s, p+"X")
}

func testRecValueRoundTrip(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	p := rprefix(t)
	values := [][]byte{
		nil, {}, []byte("x"), {0, 1, 2, 0xff, 0}, []byte("\xff\xfe not UTF-8"),
		bytes.Repeat([]byte("é"), leasehold.MaxValueLen/2), // exactly the limit
	}
	for i, val := range values {
		k := fmt.Sprintf("%s%d", p, i)
		v := mustPut(t, s, k, val, 0)
		r := mustGet(t, s, k)
		if !bytes.Equal(r.Value, val) || r.Version != v {
			t.Errorf("value %d (%d bytes): got %d bytes version %d, want version %d", i, len(val), len(r.Value), r.Version, v)
		}
		// The store keeps its own copy.
		if len(val) > 0 {
			r.Value[0] ^= 0xff
			if again := mustGet(t, s, k); !bytes.Equal(again.Value, val) {
				t.Errorf("value %d changed when the caller changed the returned slice", i)
			}
		}
	}
	buf := []byte("mine")
	k := p + "copy"
	v := mustPut(t, s, k, buf, 0)
	buf[0] = 'X'
	expectRecord(t, s, k, []byte("mine"), v)
}

func testRecInvalidInput(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	good := p + "good"
	v := mustPut(t, s, good, []byte("g"), 0)
	long := strings.Repeat("k", leasehold.MaxNameLen+1)
	big := make([]byte, leasehold.MaxValueLen+1)
	badKeys := map[string]string{
		"empty key": "", "long key": long, "NUL in key": p + "a\x00b", "newline in key": p + "a\nb",
		"DEL in key": p + "a\x7f", "invalid UTF-8": p + "\xff\xfe",
	}
	for what, k := range badKeys {
		_, err := s.GetRecord(ctx, k)
		expectInvalid(t, "GetRecord with "+what, err)
		_, err = s.PutRecord(ctx, k, []byte("x"), 0)
		expectInvalid(t, "PutRecord with "+what, err)
		err = s.DeleteRecord(ctx, k, v)
		expectInvalid(t, "DeleteRecord with "+what, err)
		_, _, err = s.AddCounter(ctx, k, 1)
		expectInvalid(t, "AddCounter with "+what, err)
	}
	_, err := s.PutRecord(ctx, good, big, v)
	expectInvalid(t, "PutRecord with an oversized value", err)
	_, err = s.PutRecord(ctx, p+"big", big, 0)
	expectInvalid(t, "PutRecord of a new key with an oversized value", err)
	expectRecord(t, s, good, []byte("g"), v)
	expectAbsent(t, s, p+"big")
	expectAbsent(t, s, p+"a")
	// The longest key is fine.
	k := p + strings.Repeat("k", leasehold.MaxNameLen-len(p))
	mustPut(t, s, k, []byte("x"), 0)
}

func testRecCancellation(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	p := rprefix(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.PutRecord(ctx, p+"k", []byte("x"), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("PutRecord with a cancelled context: %v, want context.Canceled", err)
	}
	if _, _, err := s.AddCounter(ctx, p+"n", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("AddCounter with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: p + "t", Value: []byte("x")}}}); !errors.Is(err, context.Canceled) &&
		!(!h.Txn && errors.Is(err, leasehold.ErrTxnUnsupported)) {
		t.Errorf("Txn with a cancelled context: %v, want context.Canceled", err)
	}
	expectAbsent(t, s, p+"k")
	expectAbsent(t, s, p+"n")
	expectAbsent(t, s, p+"t")
}

// testRecSeparateFromLeases: where the record store is also a lease store,
// a record and a lease of the same name do not see each other.
func testRecSeparateFromLeases(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	ls, ok := s.(leasehold.Store)
	if !ok {
		t.Skip("the record store is not a lease store")
	}
	ctx := bg(t)
	k := rprefix(t) + "both"
	rec, err := ls.TryAcquire(ctx, leasehold.AcquireRequest{Name: k, Owner: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	expectAbsent(t, s, k)
	v := mustPut(t, s, k, []byte("record"), 0)
	if got, err := ls.Get(ctx, k); err != nil || got.Token != rec.Token || got.Owner != "a" {
		t.Errorf("lease after a record of the same name was written = %+v, %v", got, err)
	}
	if err := ls.Release(ctx, k, "a", rec.Token); err != nil {
		t.Fatal(err)
	}
	expectRecord(t, s, k, []byte("record"), v)
}

func testRecLinearizable(t *testing.T, h RecordsHarness) {
	s := h.open(t)
	cfg := h.Histories
	if cfg.Prefix == "" {
		cfg.Prefix = rprefix(t)
	}
	if testing.Short() && cfg.Histories == 0 {
		cfg.Histories = 30
	}
	cfg.ActualUnknown = cfg.ActualUnknown || h.ActualUnknown
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := CheckRecordHistories(ctx, s, cfg)
	t.Logf("linearizability: %s", res)
	if !res.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", res, res.FirstBad)
	}
	if res.Writes == 0 || res.Conflicts == 0 || res.Deletes == 0 || res.Adds == 0 {
		t.Errorf("workload too weak to mean anything: %s", res)
	}
}
