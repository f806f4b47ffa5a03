package storetest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
	"github.com/leasehold/leasehold/testrig/brokenstore"
)

// refRecords is a small in-memory RecordStore written independently of
// package memory: correct with bug recNoBug, deliberately broken otherwise.
// Versions are per key and kept across deletes (a tombstone).
type refRecords struct {
	bug  recBug
	mu   sync.Mutex
	recs map[string]*refRecord
}

type refRecord struct {
	value   []byte
	version uint64
	deleted bool
}

type recBug int

const (
	recNoBug recBug = iota
	// recPutIgnoresVersion: PutRecord writes whatever version it was given.
	recPutIgnoresVersion
	// recVersionReused: a deleted key starts again from version 1, so a
	// stale version matches again.
	recVersionReused
	// recAddNotAtomic: AddCounter reads and writes in two steps, losing
	// concurrent adds.
	recAddNotAtomic
)

func (b recBug) String() string {
	return [...]string{"none", "PutIgnoresVersion", "VersionReusedAfterDelete", "AddNotAtomic"}[b]
}

func newRefRecords(bug recBug) *refRecords {
	return &refRecords{bug: bug, recs: map[string]*refRecord{}}
}

// cur returns the live record at key, and the version a new write gets.
func (s *refRecords) cur(key string) (r *refRecord, next uint64) {
	r = s.recs[key]
	switch {
	case r == nil:
		return nil, 1
	case r.deleted && s.bug == recVersionReused:
		return nil, 1
	case r.deleted:
		return nil, r.version + 1
	}
	return r, r.version + 1
}

func (s *refRecords) check(key string, expect uint64) error {
	r, _ := s.cur(key)
	switch {
	case r == nil && expect == 0:
		return nil
	case r == nil:
		return &leasehold.ConflictError{Key: key, Expected: expect}
	case r.version != expect:
		return &leasehold.ConflictError{Key: key, Expected: expect, Actual: r.version}
	}
	return nil
}

func (s *refRecords) GetRecord(ctx context.Context, key string) (leasehold.Versioned, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return leasehold.Versioned{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, _ := s.cur(key)
	if r == nil {
		return leasehold.Versioned{}, leasehold.ErrNotFound
	}
	return leasehold.Versioned{Key: key, Value: append([]byte{}, r.value...), Version: r.version}, nil
}

func (s *refRecords) PutRecord(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := storekit.ValidateValue(value); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(key, expect); err != nil && s.bug != recPutIgnoresVersion {
		return 0, err
	}
	_, next := s.cur(key)
	s.recs[key] = &refRecord{value: append([]byte{}, value...), version: next}
	return next, nil
}

func (s *refRecords) DeleteRecord(ctx context.Context, key string, expect uint64) error {
	if err := storekit.ValidateKey(key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, _ := s.cur(key); r == nil {
		return leasehold.ErrNotFound
	}
	if err := s.check(key, expect); err != nil {
		return err
	}
	s.recs[key].deleted = true
	return nil
}

func (s *refRecords) AddCounter(ctx context.Context, key string, delta int64) (int64, uint64, error) {
	if err := storekit.ValidateKey(key); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	n, err := s.added(key, delta)
	if err != nil {
		s.mu.Unlock()
		return 0, 0, err
	}
	if s.bug == recAddNotAtomic {
		s.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	_, next := s.cur(key)
	s.recs[key] = &refRecord{value: []byte(strconv.FormatInt(n, 10)), version: next}
	return n, next, nil
}

func (s *refRecords) added(key string, delta int64) (int64, error) {
	n := int64(0)
	if r, _ := s.cur(key); r != nil {
		var err error
		if n, err = storekit.ParseCounter(key, r.value); err != nil {
			return 0, err
		}
	}
	return storekit.AddInt64(key, n, delta)
}

func (s *refRecords) Txn(ctx context.Context, txn leasehold.Txn) (leasehold.TxnResult, error) {
	if err := txn.Validate(); err != nil {
		return leasehold.TxnResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return leasehold.TxnResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range txn.If {
		if err := s.check(c.Key, c.Version); err != nil {
			return leasehold.TxnResult{}, err
		}
	}
	// Work on copies, so that a failing write leaves everything as it was.
	staged := map[string]*refRecord{}
	for k, r := range s.recs {
		cp := *r
		staged[k] = &cp
	}
	live, orig := s.recs, staged
	s.recs = staged
	defer func() {
		if orig != nil {
			s.recs = live
		}
	}()
	res := leasehold.TxnResult{Versions: map[string]uint64{}}
	for _, w := range txn.Then {
		r, next := s.cur(w.Key)
		switch {
		case w.Delete:
			if r != nil {
				r.deleted = true
			}
			res.Versions[w.Key] = 0
		case w.Add != 0 && w.Value == nil:
			n, err := s.added(w.Key, w.Add)
			if err != nil {
				return leasehold.TxnResult{}, err
			}
			s.recs[w.Key] = &refRecord{value: []byte(strconv.FormatInt(n, 10)), version: next}
			res.Versions[w.Key] = next
		default:
			s.recs[w.Key] = &refRecord{value: append([]byte{}, w.Value...), version: next}
			res.Versions[w.Key] = next
		}
	}
	orig = nil // keep the staged records
	return res, nil
}

// TestRecordsReference runs the records suite on the reference store, so
// that a suite that refuses a correct store cannot pass unnoticed.
func TestRecordsReference(t *testing.T) {
	RunRecords(t, RecordsHarness{
		Open: func(testing.TB) leasehold.RecordStore { return newRefRecords(recNoBug) },
		Txn:  true,
	})
}

// expectCaught is a negative control: every run (10, or 3 with -short) of
// check on a store with the deliberate bug finds an illegal history.
func expectCaught(t *testing.T, bug fmt.Stringer, check func(context.Context) (illegal int, report fmt.Stringer)) {
	runs := 10
	if testing.Short() {
		runs = 3
	}
	t.Run(bug.String(), func(t *testing.T) {
		caught := 0
		for i := 0; i < runs; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			illegal, report := check(ctx)
			cancel()
			if illegal > 0 {
				caught++
			}
			if i == 0 {
				t.Logf("run 1: %s", report)
			}
		}
		t.Logf("%s caught in %d of %d runs", bug, caught, runs)
		if caught != runs {
			t.Errorf("%s caught in only %d of %d runs", bug, caught, runs)
		}
	})
}

// TestBrokenStoresAreCaught: for every deliberate bug of a lease store,
// every run of the linearizability check finds an illegal history.
func TestBrokenStoresAreCaught(t *testing.T) {
	for _, bug := range brokenstore.Bugs {
		expectCaught(t, bug, func(ctx context.Context) (int, fmt.Stringer) {
			res := CheckHistories(ctx, brokenstore.New(bug), HistoryConfig{Histories: 20})
			return res.Illegal, res
		})
	}
}

// TestBrokenRecordStoresAreCaught: for every deliberate bug of a record
// store, every run of the records linearizability check finds an illegal
// history.
func TestBrokenRecordStoresAreCaught(t *testing.T) {
	for _, bug := range []recBug{recPutIgnoresVersion, recVersionReused, recAddNotAtomic} {
		expectCaught(t, bug, func(ctx context.Context) (int, fmt.Stringer) {
			res := CheckRecordHistories(ctx, newRefRecords(bug), RecordHistoryConfig{Histories: 20})
			return res.Illegal, res
		})
	}
}

func recOp(client int, call, ret int64, in recInput, out recOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}

func put(key, value string, expect uint64) recInput {
	return recInput{Kind: recPut, Key: key, Value: value, Expect: expect}
}

func okV(v uint64) recOutput { return recOutput{Result: recOK, Version: v} }

func conflictAt(actual uint64) recOutput {
	return recOutput{Result: recConflict, Actual: actual, CheckActual: true}
}

// TestRecordModelVerdicts checks the model on hand-written histories whose
// verdict is known, so that a model that accepts everything cannot pass.
func TestRecordModelVerdicts(t *testing.T) {
	get := recInput{Kind: recGet, Key: "k"}
	found := func(v string, ver uint64) recOutput { return recOutput{Result: recOK, Value: v, Version: ver} }
	del := func(expect uint64) recInput { return recInput{Kind: recDelete, Key: "k", Expect: expect} }
	add := func(d int64) recInput { return recInput{Kind: recAdd, Key: "k", Delta: d} }
	unknown := recOutput{Result: recUnknown}
	const never = int64(1) << 62
	// Client 0 creates k (value 1, version 1), then updates it (value 2,
	// version 2), one after the other.
	created := recOp(0, 0, 1, put("k", "1", 0), okV(1))
	updated := recOp(0, 2, 3, put("k", "2", 1), okV(2))
	done := recOutput{Result: recOK}
	notFound := recOutput{Result: recNotFound}
	cases := []struct {
		name  string
		legal bool
		ops   []porcupine.Operation
	}{
		{"create, read", true, []porcupine.Operation{
			created,
			recOp(1, 2, 3, get, found("1", 1)),
		}},
		{"two creates of one key", false, []porcupine.Operation{
			created,
			recOp(1, 2, 3, put("k", "2", 0), okV(2)),
		}},
		{"concurrent creates: one wins, the other conflicts", true, []porcupine.Operation{
			recOp(0, 0, 10, put("k", "1", 0), okV(1)),
			recOp(1, 1, 9, put("k", "2", 0), conflictAt(1)),
		}},
		{"put with a stale version succeeds", false, []porcupine.Operation{
			created,
			updated,
			recOp(1, 4, 5, put("k", "3", 1), okV(3)),
		}},
		{"put's version does not increase", false, []porcupine.Operation{
			recOp(0, 0, 1, put("k", "1", 0), okV(5)),
			recOp(0, 2, 3, put("k", "2", 5), okV(5)),
		}},
		{"opaque versions that increase", true, []porcupine.Operation{
			recOp(0, 0, 1, put("k", "1", 0), okV(10)),
			recOp(0, 2, 3, put("k", "2", 10), okV(17)),
			recOp(1, 4, 5, get, found("2", 17)),
		}},
		{"conflict naming a version the key never had", false, []porcupine.Operation{
			created,
			recOp(1, 2, 3, put("k", "2", 7), conflictAt(4)),
		}},
		{"conflict without a known actual", true, []porcupine.Operation{
			created,
			recOp(1, 2, 3, put("k", "2", 7), recOutput{Result: recConflict}),
		}},
		{"conflict when the version matched", false, []porcupine.Operation{
			created,
			recOp(1, 2, 3, put("k", "2", 1), conflictAt(1)),
		}},
		{"stale read", false, []porcupine.Operation{
			created,
			updated,
			recOp(1, 4, 5, get, found("1", 1)),
		}},
		{"delete, then not found, then create above the deleted version", true, []porcupine.Operation{
			created,
			recOp(0, 2, 3, del(1), done),
			recOp(1, 4, 5, get, notFound),
			recOp(1, 6, 7, put("k", "2", 0), okV(2)),
		}},
		{"version reused after a delete", false, []porcupine.Operation{
			created,
			updated,
			recOp(0, 4, 5, del(2), done),
			recOp(1, 6, 7, put("k", "3", 0), okV(1)),
		}},
		{"delete with a wrong version succeeds", false, []porcupine.Operation{
			created,
			recOp(0, 2, 3, del(2), done),
		}},
		{"delete of an absent key conflicts instead of not found", false, []porcupine.Operation{
			recOp(0, 0, 1, del(1), conflictAt(0)),
		}},
		{"adds", true, []porcupine.Operation{
			recOp(0, 0, 1, add(5), found("5", 1)),
			recOp(1, 2, 3, add(-7), found("-2", 2)),
		}},
		{"lost add", false, []porcupine.Operation{
			recOp(0, 0, 10, add(1), found("1", 1)),
			recOp(1, 0, 10, add(1), found("1", 2)),
		}},
		{"add to a non-counter succeeds", false, []porcupine.Operation{
			recOp(0, 0, 1, put("k", "x", 0), okV(1)),
			recOp(0, 2, 3, add(1), found("1", 2)),
		}},
		{"add to a non-counter refused", true, []porcupine.Operation{
			recOp(0, 0, 1, put("k", "x", 0), okV(1)),
			recOp(0, 2, 3, add(1), recOutput{Result: recInvalid}),
		}},
		{"indeterminate put may have taken effect", true, []porcupine.Operation{
			recOp(0, 0, never, put("k", "1", 0), unknown),
			recOp(1, 5, 6, get, found("1", 9)),
			recOp(1, 7, 8, put("k", "2", 9), okV(10)),
		}},
		{"indeterminate put may not have taken effect", true, []porcupine.Operation{
			recOp(0, 0, never, put("k", "1", 0), unknown),
			recOp(1, 5, 6, get, notFound),
		}},
		{"indeterminate put cannot have happened twice", false, []porcupine.Operation{
			recOp(0, 0, never, put("k", "1", 0), unknown),
			recOp(1, 5, 6, get, found("1", 9)),
			recOp(1, 7, 8, get, found("1", 10)),
		}},
		{"indeterminate add may have taken effect", true, []porcupine.Operation{
			recOp(0, 0, 1, add(1), found("1", 1)),
			recOp(1, 2, never, add(1), unknown),
			recOp(0, 5, 6, add(1), found("3", 7)),
		}},
		{"writes on different keys are independent", true, []porcupine.Operation{
			recOp(0, 0, 1, put("a", "1", 0), okV(1)),
			recOp(1, 2, 3, put("b", "1", 0), okV(1)),
			recOp(1, 4, 5, recInput{Kind: recGet, Key: "a"}, found("1", 1)),
		}},
	}
	for _, c := range cases {
		got := porcupine.CheckOperations(RecordModel(), c.ops)
		if got != c.legal {
			t.Errorf("%s: checker says legal=%v, want %v", c.name, got, c.legal)
		}
	}
}
