package stepfn

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/cli"
	"github.com/leasehold/leasehold/testrig/verify"
)

func TestMain(m *testing.M) {
	// "leasehold run" starts its own binary (this one) as the keeper of
	// its command's process group.
	if cli.KeeperRequested() {
		os.Exit(cli.RunKeeper())
	}
	MaybeCommand() // before MaybeWorker: the command inherits its supervisor's EnvCLI
	verify.Main(m)
}

// ttl is the machines' lease time in R14: short enough for expiries,
// holds and redrives to happen many times in a short run, long enough for
// the generator to fit the Lambda function (2 s + 10 s to start) and the
// --task work (its timeout + its grace) in it.
const ttl = 16 * time.Second

// skews are the executors' clock errors: pairwise at most 800 ms, inside
// the machines' MaxClockSkew of 1 s.
var skews = []time.Duration{-400 * time.Millisecond, 0, 400 * time.Millisecond}

// lambdaTimeout is the Lambda function's own timeout (the generator's
// --lambda-timeout, and the executor kills the function there).
const lambdaTimeout = 2 * time.Second

// config is R14's trial, with the default or long tier's size. The
// --task work's grace is not whole seconds: the generator holds the lock
// for it rounded up, which leaves the timing of this process's goroutines
// (when the work notices it was abandoned) half a second.
func config(t *testing.T, lock string) Config {
	return Config{Lock: lock, TTL: ttl, MaxDelay: 2 * time.Second, TaskGrace: 2500 * time.Millisecond,
		Slots: 8, GoClients: 2, GoTTL: 3 * time.Second, RunLoops: 1,
		Gap:      [2]time.Duration{time.Second, 3 * time.Second},
		Duration: verify.Size(35*time.Second, 10*time.Minute), Drain: time.Minute,
		Hold: [2]time.Duration{150 * time.Millisecond, 400 * time.Millisecond},
		Faults: Faults{Fail: 0.1, Service: 0.05, ServiceRan: 0.05, Overrun: 0.12, Abort: 0.18,
			AbortAfter:     [2]time.Duration{50 * time.Millisecond, 300 * time.Millisecond},
			AbortHold:      [2]time.Duration{time.Second, 1800 * time.Millisecond},
			RedriveAborted: 0.7, RedriveFailed: 0.3, RedriveDelay: [2]time.Duration{0, ttl}},
		Seed: verify.Seed(t), Dir: t.TempDir()}
}

// TestR14 is suite R14. It starts one dynalite and runs on it, at once
// (both mostly wait): "faults", the generated machines under every fault
// beside Go workers and "leasehold run" processes on one lock, which must
// show 0 overlapping critical sections, tokens increasing across all
// clients and a clean oracle; and "mutation" (see testMutation).
func TestR14(t *testing.T) {
	if testing.Short() {
		t.Skip("R14 runs for about two minutes")
	}
	tg := verify.StartTarget(t, "dynamodb")
	t.Run("faults", func(t *testing.T) {
		t.Parallel()
		testFaults(t, tg)
	})
	t.Run("mutation", func(t *testing.T) {
		t.Parallel()
		testMutation(t, tg)
	})
}

// testFaults runs trials at once on locks of their own (two in the
// default tier, four in the long one), each with 8 executions at once,
// Go workers and a leasehold run loop: one lock is mostly held by the
// faults' holds, so more locks make more critical sections per minute.
func testFaults(t *testing.T, tg verify.Target) {
	env := NewEnv(t, tg.URL, skews, lambdaTimeout)
	n := verify.Size(2, 4)
	outs := make([]Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		cfg := config(t, fmt.Sprintf("r14-%d", i))
		t.Logf("%s: seed %d", cfg.Lock, cfg.Seed)
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = env.Run(t, cfg)
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if errs[i] != nil {
			t.Fatalf("r14-%d: %v", i, errs[i])
		}
		report(t, "R14", fmt.Sprintf("dynamodb (dynalite) lock r14-%d", i), o)
		if o.Counts["executions"] == 0 || o.Result.CS == 0 {
			t.Errorf("r14-%d: nothing ran: %s", i, o.Note())
		}
		if o.Violations() > 0 {
			t.Errorf("r14-%d: violations: %s\nfirst: %s", i, o.Note(), o.First)
		}
	}
}

// faults counts the faults a trial injected.
func faults(o Outcome) int {
	n := o.Counts["aborted in the task"]
	for k, v := range o.Counts {
		if strings.HasPrefix(k, "redriven from") || (strings.Contains(k, " body ") && !strings.HasSuffix(k, " ok")) {
			n += v
		}
	}
	return n
}

func report(t *testing.T, suite, store string, o Outcome) {
	t.Helper()
	checker := "ok"
	if o.Violations() > 0 {
		checker = "violations"
	}
	verify.Report(t, verify.Row{Suite: suite, Store: store, Ops: o.Result.CS, Faults: faults(o),
		Violations: o.Violations(), Checker: checker, Note: o.Note()})
}
