package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

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
