package partition_test

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/partition"
)

// TestR7Kill is R7's member-kill row (R7-kill, etcd-3): the fenced lock
// workload on the 3-member etcd cluster of scripts/engines.sh
// (LEASEHOLD_TEST_ETCD_CLUSTER, all three endpoints in every worker's
// store URL), while its members are SIGKILLed and restarted on their data
// under load: every 2–4 s one member, the leader or a follower in turn
// (seeded), down for 1–3 s, restarted through engines.sh (which keeps its
// pids), and back in the cluster before the next kill, so that a quorum
// of two is always left. It needs no root, and runs in the default tier
// (45 s of faults) and the long one (5 minutes).
//
// Pass: porcupine finds every key's history linearizable (Unknown fails),
// no token regression, no overlapping critical sections, no lost, stale or
// late write at the fenced oracle; and writes accepted. (How many kills
// had no write accepted before the cluster was whole again is reported,
// not asserted: that is speed.) A killed leader's successor renews
// every lease when it takes office: modelled from the raft term as in
// TestR7, with the unanswered acquires (modelEtcd).
func TestR7Kill(t *testing.T) {
	cl := enginetest.SharedEtcdCluster(t)
	// Whatever happens, leave the shared cluster whole.
	t.Cleanup(func() {
		for i := 1; i <= 3; i++ {
			if err := cl.Start(i); err != nil {
				t.Errorf("leaving the cluster whole: %v", err)
			}
		}
	})
	names := []string{"m1", "m2", "m3"}
	m := partition.NewMembers(cl.Addrs, names, nil)
	waitWhole := func(why string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			l, err := m.Leader()
			if err == nil && l >= 0 && len(membersUp(m)) == 3 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd cluster not whole 60 s %s (leader: %d, %v; up: %v)", why, l, err, membersUp(m))
			}
		}
	}
	for i := 1; i <= 3; i++ { // a run that died mid-fault may have left one down
		if err := cl.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	waitWhole("before the run")

	seed := verify.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0x7b))
	length := verify.Size(30*time.Second, 5*time.Minute)
	if v := os.Getenv("LEASEHOLD_R7_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LEASEHOLD_R7_FOR: %v", err)
		}
		length = d
	}
	const ttl = 2 * time.Second

	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	// The cluster outlives the run: a prefix of its own.
	prefix := fmt.Sprintf("r7kill-%016x/", seed)
	store := cl.URL + "?prefix=" + url.QueryEscape(prefix)
	keys := make([]string, verify.Size(8, 24))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	const workers = 6
	g := verify.StartWorkers(t, workers, verify.WorkerConfig{Store: store, Keys: keys, Clients: 2, TTL: ttl,
		Oracle: o.URL(), Hold: 200 * time.Millisecond,
		OpTimeout: 2 * time.Second, AcquireTimeout: 3 * time.Second, ErrorPause: 500 * time.Millisecond, Seed: seed})
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if workersWorking(g.History(), workers) {
			break
		}
	}

	terms := watchTerms(m)
	kills := map[string]int{}
	var stalled []string // kills after which no write was accepted before the next
	start := time.Now()
	for n := 0; time.Since(start) < length; n++ {
		time.Sleep(verify.Between(rng, 2*time.Second, 4*time.Second))
		leader, err := m.Leader()
		if err != nil {
			t.Fatalf("no leader before kill %d: %v", n+1, err)
		}
		victim, kind := leader, "leader"
		if n%2 == 1 {
			victim, kind = (leader+1+rng.IntN(2))%3, "follower"
		}
		accepted := o.Check().Accepted
		if err := cl.Kill(victim + 1); err != nil {
			t.Fatal(err)
		}
		killed := verify.Mono()
		down := verify.Between(rng, time.Second, 3*time.Second)
		t.Logf("%s (mono %.3f s): SIGKILL %s (%s), down %s", time.Since(start).Round(100*time.Millisecond), float64(killed)/1e9, names[victim], kind, down.Round(10*time.Millisecond))
		time.Sleep(down)
		if err := cl.Start(victim + 1); err != nil {
			t.Fatal(err)
		}
		waitWhole(fmt.Sprintf("after %s was restarted", names[victim]))
		t.Logf("%s back, cluster whole (%s after the kill)", names[victim], time.Duration(verify.Mono()-killed).Round(10*time.Millisecond))
		kills[kind]++
		if o.Check().Accepted == accepted {
			stalled = append(stalled, fmt.Sprintf("%s %s at %.3f s", kind, names[victim], float64(killed)/1e9))
		}
	}
	ran := time.Since(start)
	time.Sleep(2 * ttl)
	g.Stop(2 * time.Minute)
	changes := terms.Stop()

	h, added, unheard := modelEtcd(t, g.History(), changes)
	res := verify.Check(h, verify.CheckOptions{})
	res.Ops -= added
	res.Indeterminate -= added
	or := o.Check()
	faults := kills["leader"] + kills["follower"]
	verify.Report(t, verify.Row{Suite: "R7-kill", Store: "etcd-3", Ops: res.Ops, Faults: faults,
		Violations: res.Violations() + or.Violations(), Checker: res.Checker(),
		Note: fmt.Sprintf("%d members SIGKILLed and restarted in %s (leader %d, follower %d), %d leader changes (%d recovery renewals modelled), %d unanswered acquires modelled as grants the store may end at any moment; "+
			"%d critical sections, %d writes accepted, %d refused stale, %d grants, %d indeterminate ops, %d keys, TTL %s; %d kills without an accepted write before the cluster was whole again; seed %d",
			faults, ran.Round(time.Second), kills["leader"], kills["follower"], len(changes), added, unheard,
			res.CS, or.Accepted, or.Rejected, res.Grants, res.Indeterminate, len(keys), ttl, len(stalled), seed)})
	t.Logf("R7-kill: %s; oracle %+v", res, or)
	if !res.Passed() || res.Checker() != "ok" || or.Violations() > 0 {
		verify.Dump(t, "r7kill", g.History())
		t.Fatalf("R7-kill: %s\noracle: %d lost updates, %d stale accepted, %d after deadline, %d counter mismatches; first: %s\nworker logs:\n%s",
			res, or.LostUpdates, or.StaleAccepted, or.AfterDeadline, or.CounterMismatch, or.First, verify.Clip(g.Logs(), 60))
	}
	if faults == 0 || or.Accepted == 0 || kills["leader"] == 0 {
		t.Fatalf("R7-kill: %d kills (%d of the leader), %d writes accepted: the run tested nothing\nworker logs:\n%s", faults, kills["leader"], or.Accepted, verify.Clip(g.Logs(), 60))
	}
}

// membersUp returns the members that answer a status request.
func membersUp(m *partition.Members) []int {
	var up []int
	for i := range m.Addrs {
		if _, err := m.Status(i); err == nil {
			up = append(up, i)
		}
	}
	return up
}
