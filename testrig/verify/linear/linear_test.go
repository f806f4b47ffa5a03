// Package linear is suite R2 of the verification plan: linearizability
// without faults. On every store present, directly and through the lease
// server in front of it, worker processes make random lease operations on
// 16 keys (1,000 operations per key in the long tier) and porcupine checks
// each key's history against the lease-aware model.
package linear

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) { verify.Main(m) }

const keys = 16

func TestR2Linearizable(t *testing.T) {
	opsPerKey := verify.Size(100, 1000)
	for _, name := range verify.AllStores {
		t.Run(name, func(t *testing.T) {
			direct := verify.StartTarget(t, name)
			run(t, direct, opsPerKey)
			// Through a server in front of the store: in the default tier
			// only for memory (the server keeps the queue) and Redis (the
			// store keeps it); the proxy's code is the same for the others,
			// and each store's own conformance suite checks its histories
			// with porcupine too. The long tier runs every store.
			if name != "server" && (verify.Long() || name == "memory" || name == "redis") {
				run(t, verify.ProxyTarget(t, direct), opsPerKey)
			}
		})
	}
}

func run(t *testing.T, tg verify.Target, opsPerKey int) {
	t.Helper()
	const workers, clients = 4, 4
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("r2/%s/k%d", tg.Name, i)
	}
	// About opsPerKey operations per key: each client's operations spread
	// over all keys (keepalive-free, so every operation is the client's).
	cycles := opsPerKey * keys / (workers * clients)
	// etcd keeps a lease for max(TTL rounded up to a second, 2 s)
	// (docs/stores/etcd.md); with whole seconds of 2 s or more (its MinTTL)
	// it keeps exactly what was asked, which is what the model checks.
	ttl := max(200*time.Millisecond, tg.Engine.MinTTL)
	gap := min(ttl/2, 250*time.Millisecond)
	g := verify.StartWorkers(t, workers, verify.WorkerConfig{Store: tg.URL, Keys: ks, Mode: "random",
		Clients: clients, Cycles: cycles, TTL: ttl, Gap: gap, OpTimeout: 10 * time.Second})
	g.Wait(20 * time.Minute)
	res := verify.Check(g.History(), verify.CheckOptions{})
	verify.Report(t, verify.Row{Suite: "R2", Store: tg.Name, Ops: res.Ops, Violations: res.Violations(), Checker: res.Checker(),
		Note: fmt.Sprintf("%d/%d keys ok, %d grants, %d indeterminate", res.Ok, res.Keys, res.Grants, res.Indeterminate)})
	if !res.Passed() || res.Keys != keys {
		t.Fatalf("%s: %s\nworker logs:\n%s", tg.Name, res, g.Logs())
	}
}
