//go:build unix

package failover

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/pgreplica"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/crash"
	"github.com/leasehold/leasehold/testrig/verify/recipes"
)

// pgRun is one run of R18 on PostgreSQL with a promoted replica.
type pgRun struct {
	promotions int
	settle     time.Duration // load between two promotions (and after the last)
	ttl        time.Duration // lease TTL, and the store's hold-back
	hold       time.Duration // how long a holder stays in its critical section
	keys       int
	stores     int // Stores (pools) on the URL, each with clients logical processes
	clients    int
	seed       uint64
	// mode is the workers' mode: "" the fenced lock workload, "election"
	// the leader-election recipe as R9 runs it, each key an election.
	mode string
}

// pgRunFor is the default tier's run (about 40 s) or the long tier's
// (several minutes) in mode. Elections are fewer than the lock's keys, so
// that each has standbys waiting on its leader.
func pgRunFor(seed uint64, mode string) pgRun {
	keys := verify.Size(8, 16)
	if mode == "election" {
		keys = verify.Size(3, 6)
	}
	return pgRun{
		promotions: verify.Size(4, 24),
		settle:     verify.Size(3*time.Second, 6*time.Second),
		ttl:        2 * time.Second,
		hold:       700 * time.Millisecond,
		keys:       keys,
		stores:     3,
		clients:    2,
		seed:       seed,
		mode:       mode,
	}
}

// pgOutcome is what a run found.
type pgOutcome struct {
	res         verify.Result
	terms       recipes.Terms // elections only
	or          verify.OracleResult
	promotions  int
	lost        int   // acknowledged grants missing on the promoted replica
	resurrected int   // refusals naming a grant whose release a promotion lost (left out)
	heldBack    int   // hold-back refusals after a promotion (left out: no effect)
	timeline    int64 // the primary's timeline at the end
	took        time.Duration
	logs        string
}

func (o pgOutcome) violations() int {
	return o.res.Violations() + o.terms.Violations() + o.or.Violations()
}

func (o pgOutcome) note(r pgRun) string {
	work := fmt.Sprintf("%d cycles", o.res.CS)
	if r.mode == "election" {
		work = fmt.Sprintf("%d leaderships in %d terms of %d elections", o.terms.Leaderships, o.terms.Terms, r.keys)
	}
	return fmt.Sprintf("%d promotions (timeline 1 → %d), each after a detach of the replica for 0–1 s (an async replica behind), the old primary killed and re-based with pg_basebackup; %d acknowledged grants lost by the promotions; %s (%d accepted writes, %d refused stale), %d grants, %d indeterminate ops (besides %d hold-back refusals and %d refusals naming a grant whose release a promotion lost), %d keys, TTL and hold-back %s, in %s; seed %d",
		o.promotions, o.timeline, o.lost, work, o.or.Accepted, o.or.Rejected, o.res.Grants, o.res.Indeterminate, o.heldBack, o.resurrected, r.keys, r.ttl,
		o.took.Round(time.Second), r.seed)
}

// runPromotions runs r.mode's workload (verify.RunInProcess, one
// Store per group of logical processes, all on the set's multi-host URL)
// through r.promotions promotions: each time the replica is detached (it
// stops receiving WAL: what the primary commits from then on is what an
// async replica behind would lose), 0–1 s later the primary is killed
// (SIGKILL: fenced) and the replica promoted; the clients find it through
// the URL; the old primary is then re-based as the new replica. The
// history gets a "lose" operation per key and promotion, from the detach
// to the promotion (crash.StateLosses): the model lets each lose the lease
// and its fence, and nothing else, which is what the store's hold-back and
// token floor promise.
func runPromotions(t *testing.T, r pgRun) pgOutcome {
	start := time.Now()
	set := pgreplica.Start(t)
	o := verify.MustOracle(t, true, nil)
	defer o.Close()
	rng := rand.New(rand.NewPCG(r.seed, 0x18))
	url := set.URL() + "&table=r18_leases&connect_timeout=2&holdback=" + r.ttl.String()
	keys := make([]string, r.keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("r18/k%d", i)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var events []verify.Event
	var logs strings.Builder
	for i := range r.stores {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		st, err := stores.Open(octx, url)
		cancel()
		if err != nil {
			t.Fatalf("open %s: %v", url, err)
		}
		defer st.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := verify.RunInProcess(ctx, st, verify.WorkerConfig{ID: fmt.Sprintf("w%d", i), Mode: r.mode, Keys: keys, Clients: r.clients,
				TTL: r.ttl, Oracle: o.URL(), Hold: r.hold, ErrorPause: 300 * time.Millisecond, Seed: r.seed + uint64(i)}, verify.InProcess{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fmt.Fprintf(&logs, "w%d: %v\n", i, err)
				return
			}
			for _, ev := range h.Events {
				if ev.E == "log" {
					fmt.Fprintf(&logs, "%s %s\n", ev.Worker, ev.Msg)
				} else {
					events = append(events, ev)
				}
			}
		}()
	}
	var restarts []crash.Restart
	type snapshot struct {
		at     int64
		tokens map[string]int64
	}
	var snaps []snapshot
	for range r.promotions {
		time.Sleep(r.settle)
		detached := verify.Mono()
		set.Detach()
		time.Sleep(verify.Between(rng, 0, time.Second))
		set.Kill(set.Primary())
		set.Promote()
		up := verify.Mono()
		restarts = append(restarts, crash.Restart{Killed: detached, Up: up})
		snaps = append(snaps, snapshot{at: up, tokens: rowTokens(t, set)})
		set.Rebase()
	}
	time.Sleep(r.settle)
	stop()
	wg.Wait()
	out := pgOutcome{promotions: len(restarts), timeline: set.Timeline(), logs: logs.String()}
	h := &verify.History{Events: events}
	// Grants acknowledged before a promotion whose token is above the
	// promoted replica's row: lost by it.
	for key, ops := range h.LeaseOps() {
		for i, s := range snaps {
			from := int64(0)
			if i > 0 {
				from = snaps[i-1].at
			}
			for _, op := range ops {
				if op.Kind == "acquire" && op.OK && !op.Unknown && op.Return > from && op.Return < s.at && int64(op.OutToken) > s.tokens[key] {
					out.lost++
				}
			}
		}
	}
	h, out.heldBack = dropHoldbackRefusals(h)
	h, out.resurrected = dropLostReleaseRefusals(h, restarts, r.ttl)
	h, lostOps := crash.StateLosses(h, restarts)
	out.res = verify.Check(h, verify.CheckOptions{})
	out.res.Ops -= lostOps
	if r.mode == "election" {
		out.terms = recipes.CheckTerms(h)
	}
	out.or = o.Check()
	out.took = time.Since(start)
	return out
}

// rowTokens reads every name's token on the primary.
func rowTokens(t *testing.T, set *pgreplica.Set) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	var list string
	if err := set.Query(set.Primary(), "SELECT coalesce(string_agg(name || '=' || token, ' '), '') FROM r18_leases WHERE name LIKE 'r18/%'", &list); err != nil {
		t.Fatalf("read the promoted node's tokens: %v", err)
	}
	for _, f := range strings.Fields(list) {
		k, v, _ := strings.Cut(f, "=")
		var n int64
		fmt.Sscan(v, &n)
		out[k] = n
	}
	return out
}

// TestR18Postgres is suite R18's row for PostgreSQL with a promoted
// replica: the fenced lock workload through repeated promotions of an
// asynchronous replica that fell behind. Pass: 0 overlapping critical
// sections, 0 token regressions, every key linearizable under the model
// with a "lose" per promotion, the oracle clean (no lost, duplicated or
// stale-accepted write), and writes accepted.
func TestR18Postgres(t *testing.T) { pgRow(t, "postgres (promoted replica)", "") }

// TestR18PostgresElection is R18's row postgres-election: the
// leader-election recipe (R9's "election" mode, 3 elections) through the
// promotions of TestR18Postgres. Pass: as TestR18Postgres (no two leaders
// of one election at once, the term being the token), and at most one
// leader per term, terms increasing over time (recipes.CheckTerms), and
// leaderships that did their work.
func TestR18PostgresElection(t *testing.T) {
	pgRow(t, "postgres-election (promoted replica)", "election")
}

// pgRow runs one row in mode, reports it as store, and fails the test on a
// violation or a run that tested nothing.
func pgRow(t *testing.T, store, mode string) {
	r := pgRunFor(verify.Seed(t), mode)
	out := runPromotions(t, r)
	verify.Report(t, verify.Row{Suite: "R18", Store: store, Ops: out.res.Ops, Faults: out.promotions,
		Violations: out.violations(), Checker: out.res.Checker(), Note: out.note(r)})
	t.Logf("%s; oracle %+v", out.res, out.or)
	if mode == "election" {
		t.Logf("%s", out.terms)
	}
	if out.violations() > 0 || !out.res.Passed() {
		first := out.res.FirstBad
		if first == "" {
			first = out.terms.First
		}
		if first == "" {
			first = out.or.First
		}
		t.Fatalf("violations: %d, checker %s: %s\n%s\n%s\noracle: %+v\nlogs:\n%s", out.violations(), out.res.Checker(), first, out.res, out.terms, out.or, verify.Clip(out.logs, 60))
	}
	if out.or.Accepted == 0 || out.promotions == 0 || mode == "election" && out.terms.Leaderships == 0 {
		t.Fatalf("%d promotions, %d writes accepted, %d leaderships: the run tested nothing\nlogs:\n%s", out.promotions, out.or.Accepted, out.terms.Leaderships, verify.Clip(out.logs, 60))
	}
}
