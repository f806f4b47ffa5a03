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
}

// pgRunFor is the default tier's run (about 40 s) or the long tier's
// (several minutes).
func pgRunFor(seed uint64) pgRun {
	return pgRun{
		promotions: verify.Size(4, 24),
		settle:     verify.Size(3*time.Second, 6*time.Second),
		ttl:        2 * time.Second,
		hold:       700 * time.Millisecond,
		keys:       verify.Size(8, 16),
		stores:     3,
		clients:    2,
		seed:       seed,
	}
}

// pgOutcome is what a run found.
type pgOutcome struct {
	res        verify.Result
	or         verify.OracleResult
	promotions int
	lost       int   // acknowledged grants missing on the promoted replica
	timeline   int64 // the primary's timeline at the end
	took       time.Duration
	logs       string
}

func (o pgOutcome) violations() int { return o.res.Violations() + o.or.Violations() }

func (o pgOutcome) note(r pgRun) string {
	return fmt.Sprintf("%d promotions (timeline 1 → %d), each after a detach of the replica for 0–1 s (an async replica behind), the old primary killed and re-based with pg_basebackup; %d acknowledged grants lost by the promotions; %d cycles (%d accepted writes, %d refused stale), %d grants, %d indeterminate ops, %d keys, TTL and hold-back %s, in %s; seed %d",
		o.promotions, o.timeline, o.lost, o.res.CS, o.or.Accepted, o.or.Rejected, o.res.Grants, o.res.Indeterminate, r.keys, r.ttl,
		o.took.Round(time.Second), r.seed)
}

// runPromotions runs the fenced lock workload (verify.RunInProcess, one
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
			h, err := verify.RunInProcess(ctx, st, verify.WorkerConfig{ID: fmt.Sprintf("w%d", i), Keys: keys, Clients: r.clients,
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
	h, lostOps := crash.StateLosses(h, restarts)
	out.res = verify.Check(h, verify.CheckOptions{})
	out.res.Ops -= lostOps
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
func TestR18Postgres(t *testing.T) {
	r := pgRunFor(verify.Seed(t))
	out := runPromotions(t, r)
	verify.Report(t, verify.Row{Suite: "R18", Store: "postgres (promoted replica)", Ops: out.res.Ops, Faults: out.promotions,
		Violations: out.violations(), Checker: out.res.Checker(), Note: out.note(r)})
	t.Logf("%s; oracle %+v", out.res, out.or)
	if out.violations() > 0 || !out.res.Passed() {
		first := out.res.FirstBad
		if first == "" {
			first = out.or.First
		}
		t.Fatalf("violations: %d, checker %s: %s\n%s\noracle: %+v\nlogs:\n%s", out.violations(), out.res.Checker(), first, out.res, out.or, verify.Clip(out.logs, 60))
	}
	if out.or.Accepted == 0 || out.promotions == 0 {
		t.Fatalf("%d promotions, %d writes accepted: the run tested nothing\nlogs:\n%s", out.promotions, out.or.Accepted, verify.Clip(out.logs, 60))
	}
}
