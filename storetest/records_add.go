package storetest

import (
	"math"
	"sort"
	"strconv"
	"sync"
	"testing"
)

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
