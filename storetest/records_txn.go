package storetest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/storekit"
)

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
