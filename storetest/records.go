package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
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

func testRecCreateOnly(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "k"
	v1 := mustPut(t, s, k, []byte("first"), 0)
	_, err := s.PutRecord(ctx, k, []byte("second"), 0)
	expectConflict(t, h, err, k, 0, v1)
	expectRecord(t, s, k, []byte("first"), v1)
	// Precomposed and decomposed é are two keys.
	a := mustPut(t, s, p+"caf\u00e9", []byte("nfc"), 0)
	b := mustPut(t, s, p+"cafe\u0301", []byte("nfd"), 0)
	expectRecord(t, s, p+"caf\u00e9", []byte("nfc"), a)
	expectRecord(t, s, p+"cafe\u0301", []byte("nfd"), b)
}

// testRecCreateRace: of 16 concurrent create-only puts of a new key,
// exactly one succeeds, and every other conflicts naming the winner's
// version.
func testRecCreateRace(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	const rounds, racers = 20, 16
	for round := 0; round < rounds; round++ {
		k := fmt.Sprintf("%s%d", p, round)
		versions := make([]uint64, racers)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				versions[i], errs[i] = s.PutRecord(ctx, k, []byte(strconv.Itoa(i)), 0)
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: racers %d and %d both created %q", round, winner, i, k)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no racer created %q: %v", round, k, errs[0])
		}
		for i, err := range errs {
			if i != winner {
				expectConflict(t, h, err, k, 0, versions[winner])
			}
		}
		expectRecord(t, s, k, []byte(strconv.Itoa(winner)), versions[winner])
	}
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

func testRecPutVersion(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "k"
	v1 := mustPut(t, s, k, []byte("a"), 0)
	v2 := mustPut(t, s, k, []byte("b"), v1)
	if v2 <= v1 {
		t.Errorf("version after put %d, want > %d", v2, v1)
	}
	// A stale version, a version never given out, and "absent" all conflict.
	for _, wrong := range []uint64{v1, v2 + 1000, 0} {
		_, err := s.PutRecord(ctx, k, []byte("c"), wrong)
		expectConflict(t, h, err, k, wrong, v2)
	}
	expectRecord(t, s, k, []byte("b"), v2)
	// A version on an absent key conflicts with actual 0, and creates nothing.
	_, err := s.PutRecord(ctx, p+"absent", []byte("c"), v2)
	expectConflict(t, h, err, p+"absent", v2, 0)
	expectAbsent(t, s, p+"absent")
}

// testRecVersionsIncrease: every write gives a greater version, including
// the re-creation of a deleted key, so that a stale version never matches
// again.
func testRecVersionsIncrease(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "k"
	var last uint64
	check := func(what string, v uint64) {
		t.Helper()
		if v <= last {
			t.Fatalf("%s: version %d, want > %d", what, v, last)
		}
		last = v
	}
	for i := 0; i < 20; i++ {
		check(fmt.Sprintf("put %d", i), mustPut(t, s, k, counter(int64(i)), last))
	}
	_, v, err := s.AddCounter(ctx, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	check("add", v)
	beforeDelete := last
	if err := s.DeleteRecord(ctx, k, last); err != nil {
		t.Fatal(err)
	}
	check("re-create after delete", mustPut(t, s, k, []byte("again"), 0))
	if err := s.DeleteRecord(ctx, k, last); err != nil {
		t.Fatal(err)
	}
	_, v, err = s.AddCounter(ctx, k, 5)
	if err != nil {
		t.Fatal(err)
	}
	check("add after delete", v)
	// The version from before the deletes matches nothing now.
	_, err = s.PutRecord(ctx, k, []byte("stale"), beforeDelete)
	expectConflict(t, h, err, k, beforeDelete, last)
}

func testRecDelete(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "k"
	v1 := mustPut(t, s, k, []byte("a"), 0)
	v2 := mustPut(t, s, k, []byte("b"), v1)
	for _, wrong := range []uint64{v1, v2 + 1} {
		expectConflict(t, h, s.DeleteRecord(ctx, k, wrong), k, wrong, v2)
	}
	expectRecord(t, s, k, []byte("b"), v2)
	if err := s.DeleteRecord(ctx, k, v2); err != nil {
		t.Fatalf("DeleteRecord with the right version: %v", err)
	}
	expectAbsent(t, s, k)
	if err := s.DeleteRecord(ctx, k, v2); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("second DeleteRecord: %v, want ErrNotFound", err)
	}
	if err := s.DeleteRecord(ctx, p+"never", 1); !errors.Is(err, leasehold.ErrNotFound) {
		t.Errorf("DeleteRecord of a never-written key: %v, want ErrNotFound", err)
	}
	expectAbsent(t, s, p+"never")
	// After a delete the key can be created again (expect 0).
	v3 := mustPut(t, s, k, []byte("c"), 0)
	expectRecord(t, s, k, []byte("c"), v3)
}

func testRecAddCounter(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "n"
	n, v1, err := s.AddCounter(ctx, k, 5)
	if err != nil || n != 5 || v1 == 0 {
		t.Fatalf("AddCounter on an absent key = %d, version %d, %v; want 5", n, v1, err)
	}
	n, v2, err := s.AddCounter(ctx, k, -7)
	if err != nil || n != -2 || v2 <= v1 {
		t.Fatalf("AddCounter(-7) = %d, version %d, %v; want -2 and version > %d", n, v2, err, v1)
	}
	expectRecord(t, s, k, []byte("-2"), v2)
	// A counter is an ordinary record: put with its version, add again.
	v3 := mustPut(t, s, k, []byte("40"), v2)
	if n, v4, err := s.AddCounter(ctx, k, 2); err != nil || n != 42 || v4 <= v3 {
		t.Errorf("AddCounter after a put = %d, version %d, %v; want 42", n, v4, err)
	}
	// Not a counter, and overflow: *InvalidError, nothing changed.
	for _, c := range []struct {
		what  string
		value []byte
		delta int64
	}{
		{"text", []byte("abc"), 1},
		{"empty", []byte{}, 1},
		{"float", []byte("1.5"), 1},
		{"too big for int64", []byte("9223372036854775808"), 1},
		{"overflow up", counter(math.MaxInt64 - 1), 2},
		{"overflow down", counter(math.MinInt64 + 1), -2},
	} {
		key := p + c.what
		v := mustPut(t, s, key, c.value, 0)
		_, _, err := s.AddCounter(ctx, key, c.delta)
		expectInvalid(t, "AddCounter on "+c.what, err)
		expectRecord(t, s, key, c.value, v)
	}
	// Up to the limits exactly is fine.
	key := p + "max"
	mustPut(t, s, key, counter(math.MaxInt64-1), 0)
	if n, _, err := s.AddCounter(ctx, key, 1); err != nil || n != math.MaxInt64 {
		t.Errorf("AddCounter to MaxInt64 = %d, %v", n, err)
	}
}

// testRecAddConcurrent: 32 goroutines add 1 fifty times each; every add
// returns a distinct value, versions increase with the values, and the sum
// is exact.
func testRecAddConcurrent(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "n"
	const workers, adds = 32, 50
	type result struct {
		n int64
		v uint64
	}
	var mu sync.Mutex
	var results []result
	var errs []error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < adds; i++ {
				n, v, err := s.AddCounter(ctx, k, 1)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					results = append(results, result{n, v})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	sort.Slice(results, func(i, j int) bool { return results[i].n < results[j].n })
	for i, r := range results {
		if r.n != int64(i+1) {
			t.Fatalf("the adds returned %d where %d was due: values lost or repeated", r.n, i+1)
		}
		if i > 0 && r.v <= results[i-1].v {
			t.Fatalf("value %d has version %d, not above value %d's %d", r.n, r.v, results[i-1].n, results[i-1].v)
		}
	}
	got := mustGet(t, s, k)
	if string(got.Value) != strconv.Itoa(workers*adds) || got.Version != results[len(results)-1].v {
		t.Errorf("counter = %q version %d, want %d version %d", got.Value, got.Version, workers*adds, results[len(results)-1].v)
	}
}

func testRecUpdate(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "k"
	res, err := leasehold.Update(ctx, s, k, func(old []byte, exists bool) ([]byte, error) {
		if exists {
			return nil, fmt.Errorf("exists before the first write: %q", old)
		}
		return []byte("v1"), nil
	}, leasehold.UpdateOptions{})
	if err != nil || res.Attempts != 1 || string(res.Value) != "v1" {
		t.Fatalf("Update of an absent key = %+v, %v", res, err)
	}
	expectRecord(t, s, k, []byte("v1"), res.Version)
	// An error from fn is returned as is and writes nothing.
	stop := errors.New("stop")
	if _, err := leasehold.Update(ctx, s, k, func([]byte, bool) ([]byte, error) { return nil, stop }, leasehold.UpdateOptions{}); err != stop {
		t.Errorf("Update with a failing fn: %v, want its error", err)
	}
	expectRecord(t, s, k, []byte("v1"), res.Version)
	// A writer that always gets in between exhausts the attempts.
	opts := leasehold.UpdateOptions{MaxAttempts: 3, BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond}
	_, err = leasehold.Update(ctx, s, k, func(old []byte, exists bool) ([]byte, error) {
		cur, err := s.GetRecord(ctx, k)
		if err != nil {
			return nil, err
		}
		if _, err := s.PutRecord(ctx, k, []byte("interloper"), cur.Version); err != nil {
			return nil, err
		}
		return []byte("never"), nil
	}, opts)
	var re *leasehold.RetriesExhaustedError
	if !errors.As(err, &re) || !errors.Is(err, leasehold.ErrConflict) || re.Attempts != 3 || re.Last == nil || re.Last.Key != k {
		t.Errorf("Update against a constant interloper: %v, want a *RetriesExhaustedError after 3 attempts", err)
	}
	if got := mustGet(t, s, k); string(got.Value) != "interloper" {
		t.Errorf("value after exhausted Update = %q", got.Value)
	}
}

// testRecUpdateConcurrent: 32 goroutines increment one record with
// leasehold.Update; no increment is lost.
func testRecUpdateConcurrent(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	k := p + "n"
	const workers, each = 32, 5
	opts := leasehold.UpdateOptions{MaxAttempts: 10000, BackoffMin: time.Millisecond, BackoffMax: 20 * time.Millisecond}
	var mu sync.Mutex
	var errs []error
	retried := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				res, err := leasehold.Update(ctx, s, k, func(old []byte, exists bool) ([]byte, error) {
					n := int64(0)
					if exists {
						var err error
						if n, err = storekit.ParseCounter(k, old); err != nil {
							return nil, err
						}
					}
					return counter(n + 1), nil
				}, opts)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Attempts > 1 {
					retried++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	got := mustGet(t, s, k)
	if string(got.Value) != strconv.Itoa(workers*each-len(errs)) {
		t.Errorf("counter after %d updates (%d failed) = %q", workers*each, len(errs), got.Value)
	}
	t.Logf("%d of %d updates needed more than one attempt", retried, workers*each)
}

// expectTxnUnsupported checks the answer of a store without transactions.
func expectTxnUnsupported(t *testing.T, s leasehold.RecordStore, txn leasehold.Txn) {
	t.Helper()
	if _, err := s.Txn(bg(t), txn); !errors.Is(err, leasehold.ErrTxnUnsupported) {
		t.Errorf("Txn on a store without transactions: %v, want ErrTxnUnsupported", err)
	}
}

func testRecTxn(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	a, b, c, d, ctr := p+"a", p+"b", p+"c", p+"d", p+"ctr"
	va := mustPut(t, s, a, []byte("A"), 0)
	vb := mustPut(t, s, b, []byte("B"), 0)
	_, vctr, err := s.AddCounter(ctx, ctr, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Txn {
		expectTxnUnsupported(t, s, leasehold.Txn{If: []leasehold.Condition{{Key: a, Version: va}}, Then: []leasehold.Write{{Key: a, Value: []byte("A2")}}})
		expectRecord(t, s, a, []byte("A"), va)
		return
	}
	unchanged := func(what string) {
		t.Helper()
		expectRecord(t, s, a, []byte("A"), va)
		expectRecord(t, s, b, []byte("B"), vb)
		expectRecord(t, s, ctr, []byte("10"), vctr)
		expectAbsent(t, s, c)
		expectAbsent(t, s, d)
		if t.Failed() {
			t.Fatalf("state changed by %s", what)
		}
	}
	writes := []leasehold.Write{
		{Key: a, Value: []byte("A2")}, {Key: c, Value: []byte("C")}, {Key: b, Delete: true}, {Key: ctr, Add: 5},
	}
	// A failing condition changes nothing; the error names the first one
	// that failed.
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: a, Version: va}, {Key: b, Version: vb + 1}}, Then: writes})
	expectConflict(t, h, err, b, vb+1, vb)
	unchanged("a transaction with a failing condition")
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: c, Version: 0}, {Key: a, Version: 0}, {Key: b, Version: 1 << 40}}, Then: writes})
	expectConflict(t, h, err, a, 0, va)
	unchanged("a transaction whose key must be absent")
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: d, Version: 3}}, Then: writes})
	expectConflict(t, h, err, d, 3, 0)
	unchanged("a transaction conditioned on an absent key's version")
	// A failing write (an add to a non-counter) changes nothing either.
	_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: c, Value: []byte("C")}, {Key: a, Add: 1}}})
	expectInvalid(t, "Txn adding to a non-counter", err)
	unchanged("a transaction adding to a non-counter")
	_, err = s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: c, Value: []byte("C")}, {Key: ctr, Add: math.MaxInt64}}})
	expectInvalid(t, "Txn overflowing a counter", err)
	unchanged("a transaction overflowing a counter")

	// Writes, deletes and adds together, conditioned on keys written and
	// not written, and on absence.
	res, err := s.Txn(ctx, leasehold.Txn{
		If:   []leasehold.Condition{{Key: a, Version: va}, {Key: b, Version: vb}, {Key: c, Version: 0}, {Key: ctr, Version: vctr}},
		Then: append(writes, leasehold.Write{Key: d, Delete: true}, leasehold.Write{Key: p + "e"}),
	})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if len(res.Versions) != 6 {
		t.Errorf("Txn versions = %v, want the 6 written keys", res.Versions)
	}
	if res.Versions[a] <= va || res.Versions[ctr] <= vctr || res.Versions[c] == 0 || res.Versions[p+"e"] == 0 {
		t.Errorf("Txn versions = %v: want new versions above a %d and ctr %d", res.Versions, va, vctr)
	}
	if v, ok := res.Versions[b]; !ok || v != 0 {
		t.Errorf("Txn versions = %v: want 0 for the deleted %q", res.Versions, b)
	}
	if v, ok := res.Versions[d]; !ok || v != 0 {
		t.Errorf("Txn versions = %v: want 0 for the delete of the absent %q", res.Versions, d)
	}
	expectRecord(t, s, a, []byte("A2"), res.Versions[a])
	expectRecord(t, s, c, []byte("C"), res.Versions[c])
	expectRecord(t, s, ctr, []byte("15"), res.Versions[ctr])
	if r := mustGet(t, s, p+"e"); len(r.Value) != 0 || r.Version != res.Versions[p+"e"] {
		t.Errorf("write with no value: got %q version %d", r.Value, r.Version)
	}
	expectAbsent(t, s, b)
	expectAbsent(t, s, d)
	// The old versions no longer match.
	_, err = s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: a, Version: va}}, Then: []leasehold.Write{{Key: a, Value: []byte("x")}}})
	expectConflict(t, h, err, a, va, res.Versions[a])
	// A re-created key's version is above its deleted one.
	res2, err := s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: b, Version: 0}}, Then: []leasehold.Write{{Key: b, Add: 1}}})
	if err != nil || res2.Versions[b] <= vb {
		t.Errorf("re-creating %q in a Txn: versions %v, %v; want above %d", b, res2.Versions, err, vb)
	}
	expectRecord(t, s, b, []byte("1"), res2.Versions[b])
	// Without conditions.
	res3, err := s.Txn(ctx, leasehold.Txn{Then: []leasehold.Write{{Key: ctr, Add: -20}}})
	if err != nil || res3.Versions[ctr] <= res.Versions[ctr] {
		t.Errorf("Txn without conditions: %v, %v", res3, err)
	}
	expectRecord(t, s, ctr, []byte("-5"), res3.Versions[ctr])
}

func testRecTxnInvalid(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	a := p + "a"
	va := mustPut(t, s, a, []byte("A"), 0)
	many := make([]leasehold.Write, leasehold.MaxTxnOps+1)
	for i := range many {
		many[i] = leasehold.Write{Key: fmt.Sprintf("%smany/%d", p, i), Value: []byte("x")}
	}
	bad := []struct {
		what string
		txn  leasehold.Txn
	}{
		{"no writes", leasehold.Txn{If: []leasehold.Condition{{Key: a, Version: va}}}},
		{"too many writes", leasehold.Txn{Then: many}},
		{"too many conditions and writes", leasehold.Txn{
			If:   []leasehold.Condition{{Key: a, Version: va}},
			Then: many[:leasehold.MaxTxnOps],
		}},
		{"a key written twice", leasehold.Txn{Then: []leasehold.Write{{Key: p + "b", Value: []byte("1")}, {Key: p + "b", Delete: true}}}},
		{"a key conditioned twice", leasehold.Txn{
			If:   []leasehold.Condition{{Key: a, Version: va}, {Key: a, Version: va}},
			Then: []leasehold.Write{{Key: p + "b", Value: []byte("1")}},
		}},
		{"a bad key in a condition", leasehold.Txn{If: []leasehold.Condition{{Key: "a\nb", Version: 1}}, Then: []leasehold.Write{{Key: p + "b"}}}},
		{"a bad key in a write", leasehold.Txn{Then: []leasehold.Write{{Key: p + "b"}, {Key: ""}}}},
		{"an oversized value", leasehold.Txn{Then: []leasehold.Write{{Key: p + "b"}, {Key: p + "c", Value: make([]byte, leasehold.MaxValueLen+1)}}}},
		{"a write that both sets and deletes", leasehold.Txn{Then: []leasehold.Write{{Key: p + "b", Value: []byte("1"), Delete: true}}}},
		{"a write that both sets and adds", leasehold.Txn{Then: []leasehold.Write{{Key: p + "b", Value: []byte("1"), Add: 1}}}},
	}
	for _, b := range bad {
		_, err := s.Txn(ctx, b.txn)
		if !h.Txn && errors.Is(err, leasehold.ErrTxnUnsupported) {
			continue
		}
		expectInvalid(t, "Txn with "+b.what, err)
	}
	expectRecord(t, s, a, []byte("A"), va)
	for _, k := range []string{p + "b", p + "c", many[0].Key, many[leasehold.MaxTxnOps].Key} {
		expectAbsent(t, s, k)
	}
	if h.Txn { // the limit itself is fine
		if _, err := s.Txn(ctx, leasehold.Txn{If: []leasehold.Condition{{Key: a, Version: va}}, Then: many[:leasehold.MaxTxnOps-1]}); err != nil {
			t.Errorf("Txn with %d conditions and writes: %v", leasehold.MaxTxnOps, err)
		}
	}
}

// testRecTxnTransfers is the order+balance example: concurrent workers move
// money between accounts, each transfer writing an order record and the two
// balances in one transaction (half of them with Add), retrying on
// conflicts. The total never changes, no balance goes negative, and there
// is one order per applied transfer.
func testRecTxnTransfers(t *testing.T, h RecordsHarness) {
	s, ctx, p := h.start(t)
	if !h.Txn {
		expectTxnUnsupported(t, s, leasehold.Txn{Then: []leasehold.Write{{Key: p + "x", Add: 1}}})
		expectAbsent(t, s, p+"x")
		return
	}
	const accounts, workers, transfers, initial = 4, 8, 20, 100
	acct := func(i int) string { return fmt.Sprintf("%sbalance/%d", p, i) }
	for i := 0; i < accounts; i++ {
		mustPut(t, s, acct(i), counter(initial), 0)
	}
	var mu sync.Mutex
	var errs []error
	var orders []string
	conflicts := 0
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			for i := 0; i < transfers; i++ {
				from := r.IntN(accounts)
				to := (from + 1 + r.IntN(accounts-1)) % accounts
				amount := int64(1 + r.IntN(30))
				order := fmt.Sprintf("%sorder/%d-%d", p, w, i)
				for attempt := 0; ; attempt++ {
					if attempt == 1000 {
						fail(fmt.Errorf("transfer %s: still conflicting after %d attempts", order, attempt))
						return
					}
					src, err := s.GetRecord(ctx, acct(from))
					if err != nil {
						fail(err)
						return
					}
					dst, err := s.GetRecord(ctx, acct(to))
					if err != nil {
						fail(err)
						return
					}
					sb, err1 := storekit.ParseCounter(src.Key, src.Value)
					db, err2 := storekit.ParseCounter(dst.Key, dst.Value)
					if err := errors.Join(err1, err2); err != nil {
						fail(err)
						return
					}
					if sb < amount {
						break // insufficient funds: no order
					}
					txn := leasehold.Txn{If: []leasehold.Condition{{Key: order, Version: 0}, {Key: src.Key, Version: src.Version}}}
					txn.Then = append(txn.Then, leasehold.Write{Key: order, Value: []byte(fmt.Sprintf("%d->%d:%d", from, to, amount))})
					if i%2 == 0 {
						txn.If = append(txn.If, leasehold.Condition{Key: dst.Key, Version: dst.Version})
						txn.Then = append(txn.Then,
							leasehold.Write{Key: src.Key, Value: counter(sb - amount)},
							leasehold.Write{Key: dst.Key, Value: counter(db + amount)})
					} else {
						txn.Then = append(txn.Then,
							leasehold.Write{Key: src.Key, Add: -amount},
							leasehold.Write{Key: dst.Key, Add: amount})
					}
					res, err := s.Txn(ctx, txn)
					if errors.Is(err, leasehold.ErrConflict) {
						mu.Lock()
						conflicts++
						mu.Unlock()
						time.Sleep(time.Duration(r.IntN(1000)) * time.Microsecond)
						continue
					}
					if err != nil {
						fail(fmt.Errorf("transfer %s: %w", order, err))
						return
					}
					if res.Versions[src.Key] <= src.Version || res.Versions[order] == 0 {
						fail(fmt.Errorf("transfer %s: versions %v", order, res.Versions))
					}
					mu.Lock()
					orders = append(orders, order)
					mu.Unlock()
					break
				}
			}
		}(w)
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	total := int64(0)
	for i := 0; i < accounts; i++ {
		r := mustGet(t, s, acct(i))
		n, err := storekit.ParseCounter(r.Key, r.Value)
		if err != nil || n < 0 {
			t.Errorf("balance %d = %q, %v", i, r.Value, err)
		}
		total += n
	}
	if total != accounts*initial {
		t.Errorf("total after transfers = %d, want %d", total, accounts*initial)
	}
	for _, o := range orders {
		mustGet(t, s, o)
	}
	if len(orders) == 0 {
		t.Error("no transfer was applied")
	}
	t.Logf("%d transfers applied, %d conflicts retried", len(orders), conflicts)
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
