package verify_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginetest"
	"github.com/leasehold/leasehold/internal/verify"
)

// TestTargetsRestart checks the plumbing every fault suite relies on: each
// store present starts, serves the lock workload from worker processes, and
// comes back after its engine is killed and restarted, with a clean history.
func TestTargetsRestart(t *testing.T) {
	for _, name := range verify.AllStores {
		t.Run(name, func(t *testing.T) {
			tg := verify.StartTarget(t, name)
			o, err := verify.NewOracle(true)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			g := verify.StartWorkers(t, 2, verify.WorkerConfig{Store: tg.URL, Keys: []string{"k"}, Clients: 2,
				Cycles: 10, TTL: time.Second, Oracle: o.URL()})
			if !tg.Embedded() {
				time.Sleep(300 * time.Millisecond)
				tg.Kill()
				time.Sleep(200 * time.Millisecond)
				tg.Start()
			}
			g.Wait(3 * time.Minute)
			res := verify.Check(g.History(), verify.CheckOptions{})
			or := o.Check()
			t.Logf("%s: %s; oracle %d accepted, %d rejected", name, res, or.Accepted, or.Rejected)
			if !res.Passed() || or.Violations() > 0 {
				t.Fatalf("violations: %s\noracle: %+v\nlogs:\n%s", res, or, g.Logs())
			}
			if or.Accepted == 0 {
				t.Fatalf("no write was accepted\nlogs:\n%s", g.Logs())
			}
		})
	}
}

// TestFit checks that a target adapts a suite's URL and TTL to its row of
// enginetest.Engines: etcd's minimum TTL, DynamoDB's clock-skew parameter.
func TestFit(t *testing.T) {
	for _, c := range []struct {
		store, url string
		ttl        time.Duration
		wantURL    string
		wantTTL    time.Duration
		wantNote   string
	}{
		{"sqlite", "sqlite://x", time.Second, "sqlite://x", time.Second, ""},
		{"etcd", "etcd://x", time.Second, "etcd://x", 2 * time.Second, "TTL 2s: etcd's minimum lease TTL"},
		{"etcd", "etcd://x", 3 * time.Second, "etcd://x", 3 * time.Second, ""},
		{"dynamodb", "dynamodb://t?region=r", time.Second, "dynamodb://t?region=r&max_clock_skew=50ms", time.Second, "max_clock_skew=50ms"},
	} {
		e, ok := enginetest.Lookup(c.store)
		if !ok {
			t.Fatalf("no row for %s", c.store)
		}
		url, ttl, note := verify.Target{Name: c.store, Engine: e}.Fit(c.url, c.ttl)
		if url != c.wantURL || ttl != c.wantTTL || note != c.wantNote {
			t.Errorf("%s Fit(%q, %s) = %q, %s, %q; want %q, %s, %q", c.store, c.url, c.ttl, url, ttl, note, c.wantURL, c.wantTTL, c.wantNote)
		}
	}
}
