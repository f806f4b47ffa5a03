package workflows

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/stores"
	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/workflow"
)

func TestMain(m *testing.M) {
	MaybeWorker()
	os.Exit(m.Run())
}

var strategies = []workflow.Strategy{workflow.Optimistic, workflow.Pessimistic, workflow.Lease, workflow.Adaptive}

// plan is what the suite runs on one store in the current tier.
type plan struct {
	store    string
	procs    int
	duration time.Duration
	kills    int
	restart  bool
	local    bool // also Adaptive with LocalQueue
	api      int  // through that many servers' workflow HTTP API, in front of the store
}

func plans() []plan {
	if verify.Long() {
		return []plan{
			{store: "memory", procs: 4, duration: 10 * time.Second, local: true},
			{store: "sqlite", procs: 4, duration: 15 * time.Second, kills: 2, local: true},
			{store: "postgres", procs: 4, duration: 15 * time.Second, kills: 2, restart: true, local: true},
			{store: "redis", procs: 4, duration: 15 * time.Second, kills: 2, restart: true},
			{store: "etcd", procs: 3, duration: 15 * time.Second, kills: 1, restart: true},
			{store: "server", procs: 3, duration: 15 * time.Second, kills: 1, restart: true},
			{store: "sqlite", procs: 2, duration: 10 * time.Second, kills: 2, api: 2},
			{store: "postgres", procs: 2, duration: 10 * time.Second, kills: 2, restart: true, api: 2},
		}
	}
	return []plan{
		{store: "memory", procs: 3, duration: 3 * time.Second, local: true},
		{store: "sqlite", procs: 3, duration: 4 * time.Second, kills: 1},
		{store: "postgres", procs: 3, duration: 4 * time.Second, kills: 1},
		{store: "server", procs: 2, duration: 3 * time.Second, restart: true},
		{store: "sqlite", procs: 2, duration: 3 * time.Second, kills: 1, api: 2},
	}
}

func target(t *testing.T, name string) verify.Target {
	switch name {
	case "memory":
		return verify.Target{Name: "memory"}
	case "server":
		return Serve(t)
	}
	return verify.StartTarget(t, name)
}

// TestR16 runs every strategy on every store of the tier and checks every
// answer against the final history.
func TestR16(t *testing.T) {
	seed := verify.Seed(t)
	t.Logf("seed %d (%s=%d reruns it)", seed, verify.EnvSeed, seed)
	for _, pl := range plans() {
		row := pl.store
		if pl.api > 0 {
			row = fmt.Sprintf("server-api(%s)", pl.store)
		}
		t.Run(row, func(t *testing.T) {
			tg := target(t, pl.store)
			type variant struct {
				s     workflow.Strategy
				local bool
			}
			var vs []variant
			for _, s := range strategies {
				vs = append(vs, variant{s, false})
			}
			if pl.local {
				vs = append(vs, variant{workflow.Adaptive, true})
			}
			for i, v := range vs {
				name := string(v.s)
				if v.local {
					name += "-local"
				}
				t.Run(name, func(t *testing.T) {
					tr := Trial{Target: tg, Strategy: v.s, LocalQueue: v.local, Procs: pl.procs, Clients: 4,
						Duration: pl.duration, Seed: seed + uint64(i)*104729, API: pl.api}
					if !tg.Embedded() && tg.Kill != nil {
						tr.Kills, tr.Restart = pl.kills, pl.restart
					} else if pl.store == "sqlite" {
						tr.Kills = pl.kills
					}

					if tr.Kills > 0 || tr.Restart {
						// A killed holder's lease blocks the others for its
						// TTL: keep it below LockWait, so that a lock
						// timeout is never the kill's doing.
						tr.LeaseTTL, tr.LockWait = 2*time.Second, 5*time.Second
					} else {
						// No holder dies: a lease left behind by a call that
						// gave up would keep a request asked again waiting
						// past LockWait — an unresolved request.
						tr.LeaseTTL, tr.LockWait = 30*time.Second, 3*time.Second
					}
					o := RunTrial(t, tr)
					t.Logf("%s", o.Result)
					for _, f := range o.Result.First {
						t.Logf("  %s", f)
					}
					checker := "ok"
					if o.Result.Failures() > 0 {
						checker = "wrong answers"
						t.Errorf("%d failures", o.Result.Failures())
					}
					verify.Report(t, verify.Row{Suite: "R16", Store: row, Ops: o.Result.Calls, Faults: o.Faults,
						Violations: o.Result.Failures(), Checker: checker,
						Note: fmt.Sprintf("%s, %d %s; %d transitions; wrong %d, unresolved %d, lost %d, duplicated %d",
							name, pl.procs, map[bool]string{true: "Workflows values in one process", false: "worker processes"}[pl.store == "memory"], o.Result.Transitions, o.Result.Wrong, o.Result.Unresolved, o.Result.Lost, o.Result.Duplicated)})
				})
			}
		})
	}
}

// TestR16DynamoDB: dynalite has no multi-key transactions, which every
// transition needs: a transition there is refused with
// leasehold.ErrTxnUnsupported and changes nothing.
func TestR16DynamoDB(t *testing.T) {
	if !verify.Long() {
		t.Skip("long tier (LEASEHOLD_LONG=1): dynalite has no transactions; this only checks the refusal")
	}
	tg := verify.StartTarget(t, "dynamodb")
	ctx := context.Background()
	st, err := stores.Open(ctx, tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rs := st.(leasehold.RecordStore)
	ops := 0
	for _, s := range strategies {
		w, err := New(Config{Workflow: "r16ddb" + string(s)[:3], Strategy: s}, rs, st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Create(ctx, "i"); err != nil {
			t.Fatalf("%s: create: %v", s, err)
		}
		_, err = w.Transition(ctx, "i", "A", "B", "a", "r1")
		ops++
		if !errors.Is(err, leasehold.ErrTxnUnsupported) {
			t.Fatalf("%s: transition on dynalite: %v, want ErrTxnUnsupported", s, err)
		}
		in, err := w.Get(ctx, "i")
		if err != nil || in.State != "A" || in.Version != 0 {
			t.Fatalf("%s: after the refusal: %+v, %v", s, in, err)
		}
	}
	verify.Report(t, verify.Row{Suite: "R16", Store: "dynamodb", Ops: ops, Checker: "ok",
		Note: "unsupported: dynalite has no TransactWriteItems; every strategy's transition is refused with ErrTxnUnsupported and changes nothing"})
}
