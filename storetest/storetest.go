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
		{"ListPrefix", testListPrefix},
		{"Watch", testWatch},
		{"Keepalive", testKeepalive},
		{"Linearizable", testLinearizable},
		{"Semaphore", testSemaphore},
		{"SemaphoreExpiry", testSemaphoreExpiry},
		{"Election", testElection},
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
}
