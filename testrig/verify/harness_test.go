package verify_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) { verify.Main(m) }

// TestHarnessSQLite runs the lock workload in worker processes on one
// SQLite file and checks the history and the oracle: the harness itself
// working end to end.
func TestHarnessSQLite(t *testing.T) {
	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	db := "sqlite://" + filepath.Join(t.TempDir(), "leases.db")
	// TTL 10 s: no worker crashes here, so the TTL never delays a grant;
	// with 1 s, a worker descheduled for most of a second between its
	// deadline check and its write (a loaded 2-core machine: 729 ms seen)
	// wrote after its local deadline and failed the test.
	g := verify.StartWorkers(t, 3, verify.WorkerConfig{Store: db, Keys: []string{"k0", "k1"}, Clients: 2,
		Cycles: 15, TTL: 10 * time.Second, Oracle: o.URL(), Hold: 5 * time.Millisecond})
	g.Wait(2 * time.Minute)
	res := verify.Check(g.History(), verify.CheckOptions{})
	or := o.Check()
	t.Logf("history: %s", res)
	t.Logf("oracle: %+v", or)
	if !res.Passed() || or.Violations() > 0 {
		t.Fatalf("violations:\n%s\n%+v\nlogs:\n%s", res, or, g.Logs())
	}
	if res.CS != 90 || or.Accepted != 90 {
		t.Fatalf("want 90 critical sections and accepted writes, got %d and %d\nlogs:\n%s", res.CS, or.Accepted, g.Logs())
	}
}
