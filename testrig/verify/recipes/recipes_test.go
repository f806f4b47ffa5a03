package recipes_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/crash"
	"github.com/leasehold/leasehold/testrig/verify/pause"
	"github.com/leasehold/leasehold/testrig/verify/recipes"
)

func TestMain(m *testing.M) { verify.Main(m) }

// envSeed, when set, fixes the seed of the fault schedule and the workers'
// choices (their timing is still the machine's), to rerun a failure.
const envSeed = verify.EnvSeed

// defaultStores are the stores of the default tier; the long tier runs all.
var defaultStores = []string{"redis", "server"}

// permits is the semaphore's N.
const permits = 3

// TestR9 is suite R9: leader elections and a semaphore of N = 3 permits,
// each from worker processes of its own, against one store while faults
// are injected in turn, one every 1.5–3 s:
//
//   - kill: SIGKILL the engine (or the lease server) and restart it after
//     0.5–1 s (R3); on the embedded SQLite store, which has no engine, a
//     worker process of each group is killed and started again instead;
//   - pause-engine: SIGSTOP the engine (or server) for 1–3 s, then SIGCONT
//     (R5; not on SQLite);
//   - pause-holder: SIGSTOP a leader and a permit holder in the middle of
//     their work (at their next read of the oracle) for 1.5–3 × TTL, then
//     SIGCONT (R4).
//
// Leaders write to a fenced oracle counter under their term, permit holders
// to their permit's counter under its token.
//
// Pass, elections: at most one leader per term, terms increasing over time
// (a leadership never has a term at or below that of one that had ended
// before it began), no two leaderships at once; semaphore: never more than
// N holders at once, nor two holders of one permit, nor a permit index
// outside [0, N); both: every lease's history linearizable (porcupine;
// Unknown fails), no token regression, no lost, stale or late write at the
// oracle.
func TestR9(t *testing.T) {
	for _, name := range verify.AllStores {
		t.Run(name, func(t *testing.T) {
			if !verify.Long() && !slices.Contains(defaultStores, name) {
				t.Skipf("R9 on %s is in the long tier (LEASEHOLD_LONG=1)", name)
			}
			run(t, verify.StartTarget(t, name))
		})
	}
}

func run(t *testing.T, tg verify.Target) {
	seed := verify.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0x59))
	url, ttl, note := tg.Fit(tg.URL, time.Second)
	if note != "" {
		note = "; " + note
	}
	length := verify.Size(25*time.Second, 3*time.Minute)

	hp := recipes.NewHolderPauser()
	t.Cleanup(hp.Close)
	newOracle := func() *verify.Oracle {
		o := verify.MustOracle(t, true, hp.OnRead)
		t.Cleanup(func() { o.Close() })
		return o
	}
	oE, oS := newOracle(), newOracle()

	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("r9/%s%d", prefix, i)
		}
		return out
	}
	base := verify.WorkerConfig{Store: url, TTL: ttl, Hold: ttl / 5, OpTimeout: 2 * ttl, AcquireTimeout: 5 * ttl,
		ErrorPause: 500 * time.Millisecond, Seed: seed}
	cfgE, cfgS := base, base
	cfgE.Mode, cfgE.Keys, cfgE.Clients, cfgE.Oracle = "election", names("election", verify.Size(1, 3)), 2, oE.URL()
	cfgS.Mode, cfgS.Keys, cfgS.Clients, cfgS.Oracle = "semaphore", names("sem", verify.Size(1, 2)), 2, oS.URL()
	cfgS.Permits, cfgS.Seed = permits, seed+1000
	const workers = 3
	groups := map[string]*verify.Group{
		"election":  verify.StartWorkers(t, workers, cfgE),
		"semaphore": verify.StartWorkers(t, workers, cfgS),
	}
	// ids maps each worker process to its id in its group's history.
	ids := map[string]map[int]string{}
	respawns := map[string][]int{}
	for g, grp := range groups {
		ids[g] = map[int]string{}
		respawns[g] = make([]int, workers)
		pids := make([]int, workers)
		for i := range pids {
			pids[i] = grp.Pid(i)
			ids[g][pids[i]] = "w" + strconv.Itoa(i)
		}
		hp.Set(g, pids...)
	}

	kinds := []string{"kill", "pause-engine", "pause-holder"}
	if tg.Embedded() {
		kinds = []string{"kill", "pause-holder"}
	} else {
		t.Cleanup(tg.Resume) // never leave it stopped, whatever happens
	}
	faults := map[string]int{}
	var restarts []crash.Restart // kills of the engine
	start := time.Now()
	for n := 0; time.Since(start) < length; n++ {
		time.Sleep(verify.Between(rng, 1500*time.Millisecond, 3*time.Second))
		kind := kinds[n%len(kinds)]
		switch {
		case kind == "kill" && tg.Embedded():
			for _, g := range []string{"election", "semaphore"} {
				grp, i := groups[g], rng.IntN(workers)
				grp.KillWorker(i)
				grp.RestartWorker(i)
				respawns[g][i]++
				pids := make([]int, workers)
				for j := range pids {
					pids[j] = grp.Pid(j)
				}
				hp.Set(g, pids...)
				ids[g][pids[i]] = fmt.Sprintf("w%dr%d", i, respawns[g][i])
			}
		case kind == "kill":
			restarts = append(restarts, crash.Restart{Killed: verify.Mono()})
			tg.Kill()
			time.Sleep(verify.Between(rng, 500*time.Millisecond, time.Second))
			tg.Start()
			restarts[len(restarts)-1].Up = verify.Mono()
		case kind == "pause-engine":
			tg.Pause()
			time.Sleep(verify.Between(rng, time.Second, 3*time.Second))
			tg.Resume()
		case kind == "pause-holder":
			d := verify.Between(rng, 3*ttl/2, 3*ttl)
			hp.Arm("election", d)
			hp.Arm("semaphore", d)
			for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && (hp.Armed("election") || hp.Armed("semaphore")); {
				time.Sleep(20 * time.Millisecond)
			}
			hp.Disarm("election")
			hp.Disarm("semaphore")
			hp.Wait()
		}
		faults[kind]++
	}
	ran := time.Since(start)
	hp.Close()
	for _, g := range []string{"election", "semaphore"} {
		groups[g].Stop(2 * time.Minute)
	}
	engineFaults := faults["kill"] + faults["pause-engine"]
	faultNote := func(g string) string {
		return fmt.Sprintf("%d kills, %d engine pauses, %d holder pauses", faults["kill"], faults["pause-engine"], len(hp.Pauses(g)))
	}

	// checkGroup checks group g's history (permits holders at once) and
	// its oracle: what the workers did (the model's additions taken off),
	// and how many of its paused holders were taken over while paused.
	checkGroup := func(g string, permits int, o *verify.Oracle) (h *verify.History, res verify.Result, or verify.OracleResult, added, takeovers int) {
		h, added = history(groups[g].History(), tg.Name, restarts)
		res = verify.Check(h, verify.CheckOptions{Permits: permits})
		res.Ops -= added // report what the workers did
		res.Indeterminate -= added
		return h, res, o.Check(), added, pause.Takeovers(h, hp.Pauses(g), ids[g])
	}

	// Elections.
	hE, resE, orE, addedE, takeE := checkGroup("election", 1, oE)
	terms := recipes.CheckTerms(hE)
	verify.Report(t, verify.Row{Suite: "R9-election", Store: tg.Name, Ops: resE.Ops,
		Faults: engineFaults + len(hp.Pauses("election")), Violations: resE.Violations() + terms.Violations() + orE.Violations(),
		Checker: resE.Checker(),
		Note: fmt.Sprintf("%s in %s; %d elections, %d leaderships, %d terms, %d paused leaders replaced while paused; %d writes accepted, %d refused stale; %d indeterminate ops%s; seed %d%s",
			faultNote("election"), ran.Round(time.Second), len(cfgE.Keys), terms.Leaderships, terms.Terms, takeE,
			orE.Accepted, orE.Rejected, resE.Indeterminate, modelNote(addedE), seed, note)})
	t.Logf("R9-election %s: %s; %s; oracle %+v", tg.Name, resE, terms, orE)

	// Semaphore.
	hS, resS, orS, addedS, takeS := checkGroup("semaphore", permits, oS)
	perm := recipes.CheckPermits(hS, permits)
	verify.Report(t, verify.Row{Suite: "R9-semaphore", Store: tg.Name, Ops: resS.Ops,
		Faults: engineFaults + len(hp.Pauses("semaphore")), Violations: resS.Violations() + perm.Violations() + orS.Violations(),
		Checker: resS.Checker(),
		Note: fmt.Sprintf("%s in %s; N = %d, %d semaphores, %d permits held (at most %d at once), %d paused holders' permits taken over while paused; %d writes accepted, %d refused stale; %d indeterminate ops%s; seed %d%s",
			faultNote("semaphore"), ran.Round(time.Second), permits, len(cfgS.Keys), perm.Holds, perm.MaxAtOnce, takeS,
			orS.Accepted, orS.Rejected, resS.Indeterminate, modelNote(addedS), seed, note)})
	t.Logf("R9-semaphore %s: %s; %s; oracle %+v", tg.Name, resS, perm, orS)

	// failed reports group g's violations, if any: its checker's, its
	// recipe's (rec) and its oracle's.
	failed := func(g string, res verify.Result, rec fmt.Stringer, recViolations int, or verify.OracleResult) bool {
		if res.Passed() && res.Checker() == "ok" && recViolations == 0 && or.Violations() == 0 {
			return false
		}
		t.Errorf("R9-%s %s: %s\n%s\noracle: %d lost updates, %d stale accepted, %d after deadline, %d counter mismatches; first: %s\nworker logs:\n%s",
			g, tg.Name, res, rec, or.LostUpdates, or.StaleAccepted, or.AfterDeadline, or.CounterMismatch, or.First, verify.Clip(groups[g].Logs(), 60))
		return true
	}
	badE := failed("election", resE, terms, terms.Violations(), orE)
	if badS := failed("semaphore", resS, perm, perm.Violations(), orS); badE || badS {
		verify.Dump(t, "r9-"+tg.Name+"-election", hE)
		verify.Dump(t, "r9-"+tg.Name+"-semaphore", hS)
		return
	}
	// The run must have tested something: faults, leaders and permit
	// holders that did their work.
	if engineFaults == 0 && !tg.Embedded() || terms.Leaderships == 0 || orE.Accepted == 0 || perm.Holds == 0 || orS.Accepted == 0 {
		t.Fatalf("R9 %s: %d engine faults, %d leaderships (%d writes accepted), %d permits held (%d writes accepted): the run tested nothing\nelection logs:\n%s\nsemaphore logs:\n%s",
			tg.Name, engineFaults, terms.Leaderships, orE.Accepted, perm.Holds, orS.Accepted, verify.Clip(groups["election"].Logs(), 60), verify.Clip(groups["semaphore"].Logs(), 60))
	}
}

// history returns a worker group's history h prepared for the model, with
// the number of recovery renewals added:
//
//   - on etcd, an acquire without an answer may have been granted and
//     then ended by the store at any moment: it revokes the etcd lease of
//     an acquire whose reply never came (recipes.EtcdUnconfirmedGrants);
//   - on the lease server and etcd, which give every lease they recover
//     after a restart a full TTL again, an indeterminate renewal at each
//     kill by the holder the engine may have recovered
//     (crash.RecoveryRenewals, as in R3).
func history(h *verify.History, store string, restarts []crash.Restart) (*verify.History, int) {
	added := 0
	if store == "etcd" {
		h, _ = recipes.EtcdUnconfirmedGrants(h)
	}
	if len(restarts) > 0 && crash.ExtendsOnRecovery[store] {
		h, added = crash.RecoveryRenewals(h, restarts)
	}
	return h, added
}

func modelNote(added int) string {
	if added > 0 {
		return fmt.Sprintf("; %d recovery renewals modelled", added)
	}
	return ""
}
