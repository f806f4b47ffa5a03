// Package storetest is the conformance suite that every leasehold.Store
// passes against its real engine. A store's test calls Run with a
// constructor:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			Open: func(t testing.TB) leasehold.Store { return openMyStore(t) },
//		})
//	}
//
// The suite runs in real time with short TTLs (tens of milliseconds), since
// a networked engine's clock cannot be moved; its timing assertions have
// generous bounds and check order and counts, not speed. Each subtest uses
// names of its own, so Open may return the same backing store each time.
//
// A store that queues waiters itself (leasehold.Queuer) also runs the
// Queue* subtests — arrival order across several opened stores, no
// TryAcquire ahead of a queued waiter, a cancelled waiter leaves the
// queue, a vanished one holds it up for at most Harness.WaiterLiveness —
// and its linearizability workload mixes in AcquireWaits (see
// LeaseModel). Other stores skip them.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
)

// Harness tells the suite how to get at a store.
type Harness struct {
	// Open returns a ready store. The suite closes it. Required.
	Open func(t testing.TB) leasehold.Store
	// Reopen, for durable stores, closes s and opens the same data again.
	// When nil the restart checks are skipped.
	Reopen func(t testing.TB, s leasehold.Store) leasehold.Store
	// Histories overrides the linearizability workload (zero: defaults,
	// 200 histories).
	Histories HistoryConfig
	// TTL is the short TTL the expiry tests use (default 60ms). Stores whose
	// expiry has a coarser granularity raise it.
	TTL time.Duration

	// The queue subtests (Queue*) run when the store implements
	// leasehold.Queuer. They open several stores with Open, which for a
	// networked store are several connections (as several processes would
	// have); an in-process Open may return the same store each time, or
	// stores of their own, which the subtests notice (they then run every
	// client on one store).

	// Queued, if set, reports whether owner's AcquireWait of name waits in
	// the store's queue now, as the engine sees it (s is the store that
	// waiter uses). The queue subtests start each waiter only once the one
	// before is queued. When nil, they take a waiter as queued once its
	// AcquireWait was called and has not returned for QueueSettle, and run
	// a check whose grants came out of order once more with four times the
	// settle time before failing it.
	Queued func(ctx context.Context, s leasehold.Store, name, owner string) (bool, error)
	// QueueSettle is how long a waiter is given to be queued when Queued is
	// nil (default DefaultQueueSettle, 500ms).
	QueueSettle time.Duration
	// WaiterLiveness is the store's liveness window for queued waiters:
	// the longest that a waiter which vanished without leaving the queue
	// (its process died) can hold the queue up (default
	// DefaultWaiterLiveness, 10s). The QueueVanishedWaiter subtest allows
	// that, the vanished waiter's TTL and a margin.
	WaiterLiveness time.Duration
	// Abandon, if set, makes s vanish the way a crashed process would,
	// without removing its waiter from the queue (e.g. dropping its
	// connections). Default: s.Close().
	Abandon func(s leasehold.Store)
}

func (h Harness) ttl() time.Duration {
	if h.TTL == 0 {
		return 60 * time.Millisecond
	}
	return h.TTL
}

func (h Harness) open(t *testing.T) leasehold.Store {
	t.Helper()
	s := h.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

// Run runs the whole conformance suite.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is required")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Exclusion", testExclusion},
		{"ExpiryTakeover", testExpiryTakeover},
		{"RenewExtends", testRenewExtends},
		{"ReleaseByNonOwner", testReleaseByNonOwner},
		{"ReleaseIdempotent", testReleaseIdempotent},
		{"RetriedAcquire", testRetriedAcquire},
		{"TokensIncrease", testTokensIncrease},
		{"TokensIncreaseAcrossReopen", testReopen},
		{"DataRoundTrip", testDataRoundTrip},
		{"InvalidInput", testInvalidInput},
		{"Cancellation", testCancellation},
		{"Deadline", testDeadline},
		{"WaitDeadline", testWaitDeadline},
		{"ListPrefix", testListPrefix},
		{"Watch", testWatch},
		{"Keepalive", testKeepalive},
		{"Linearizable", testLinearizable},
		{"Semaphore", testSemaphore},
		{"SemaphoreExpiry", testSemaphoreExpiry},
		{"Election", testElection},
	}
	for _, c := range queueChecks {
		tests = append(tests, struct {
			name string
			fn   func(*testing.T, Harness)
		}{c.name, testQueue(c.fn)})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func testLinearizable(t *testing.T, h Harness) {
	s := h.open(t)
	cfg := h.Histories
	if testing.Short() && cfg.Histories == 0 {
		cfg.Histories = 40
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := CheckHistories(ctx, s, cfg)
	t.Logf("linearizability: %s", res)
	if !res.Passed() {
		t.Errorf("histories not linearizable: %s\n%s", res, res.FirstBad)
	}
	if res.Grants == 0 || res.Takeovers == 0 {
		t.Errorf("workload too weak to mean anything: %d grants, %d expiry takeovers", res.Grants, res.Takeovers)
	}
	if _, ok := s.(leasehold.Queuer); ok && !cfg.NoWaits && (res.Waits == 0 || res.WaitGrants == 0) {
		t.Errorf("workload of a Queuer too weak: %d AcquireWaits, %d granted", res.Waits, res.WaitGrants)
	}
}
