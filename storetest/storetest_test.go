package storetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/brokenstore"
	"github.com/leasehold/leasehold/storetest"
)

// TestBrokenStoresAreCaught is the negative control: for every deliberate
// bug, every run of the linearizability check finds an illegal history.
func TestBrokenStoresAreCaught(t *testing.T) {
	runs := 10
	if testing.Short() {
		runs = 3
	}
	for _, bug := range brokenstore.Bugs {
		t.Run(bug.String(), func(t *testing.T) {
			caught := 0
			for i := 0; i < runs; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				res := storetest.CheckHistories(ctx, brokenstore.New(bug), storetest.HistoryConfig{Histories: 20})
				cancel()
				if res.Illegal > 0 {
					caught++
				}
				if i == 0 {
					t.Logf("run 1: %s", res)
				}
			}
			t.Logf("%s caught in %d of %d runs", bug, caught, runs)
			if caught != runs {
				t.Errorf("%s caught in only %d of %d runs", bug, caught, runs)
			}
		})
	}
}
