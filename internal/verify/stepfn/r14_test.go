package stepfn

import (
	"os"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/verify"
)

func TestMain(m *testing.M) {
	MaybeCommand() // before MaybeWorker: the command inherits its supervisor's EnvCLI
	verify.MaybeWorker()
	os.Exit(m.Run())
}

// ttl is the machines' lease time in R14: the generator's minimum, so
// that expiries, redrives after expiry and overruns fit in a short run.
const ttl = 10 * time.Second

// skews are the executors' clock errors: pairwise at most 800 ms, inside
// the machines' MaxClockSkew of 1 s.
var skews = []time.Duration{-400 * time.Millisecond, 0, 400 * time.Millisecond}

// lambdaTimeout is the task function's own timeout. The generator does not
// know it today (no option for it), so it is Lambda's longest, 15
// minutes: what a function deployed with the maximum has.
const lambdaTimeout = 15 * time.Minute

// TestR14 runs the generated machine under every fault at once beside Go
// workers and "leasehold run" processes on one lock of one dynalite
// table, and requires 0 overlapping critical sections, tokens increasing
// across all clients, and a clean oracle.
func TestR14(t *testing.T) {
	if testing.Short() {
		t.Skip("R14 runs for a minute")
	}
	tg := verify.StartTarget(t, "dynamodb")
	env := NewEnv(t, tg.URL, skews, lambdaTimeout)
	stateTimeout := ttl - min(time.Minute, ttl/10) // the generator's task timeout
	cfg := Config{Lock: "r14", TTL: ttl, MaxDelay: 2 * time.Second,
		Slots: verify.Size(10, 30), GoClients: 2, GoTTL: 3 * time.Second, RunLoops: 2,
		Duration: verify.Size(45*time.Second, 10*time.Minute), Drain: 45 * time.Second,
		Hold: [2]time.Duration{150 * time.Millisecond, 400 * time.Millisecond},
		Faults: Faults{Fail: 0.08, Service: 0.08, Overrun: 0.08, Abort: 0.12,
			Over:           [2]time.Duration{stateTimeout + time.Second, stateTimeout + 4*time.Second},
			RedriveAborted: 0.7, RedriveFailed: 0.3, RedriveDelay: [2]time.Duration{0, 2 * ttl}},
		Seed: verify.Seed(t), Dir: t.TempDir()}
	o := env.Run(t, cfg)
	report(t, "R14", "dynamodb (dynalite)", o)
	if o.Counts["executions"] == 0 || o.Result.CS == 0 {
		t.Fatalf("nothing ran: %s", o.Note())
	}
	if o.Violations() > 0 {
		t.Errorf("violations: %s\nfirst: %s", o.Note(), o.First)
	}
}

// faults counts the faults a trial injected.
func faults(o Outcome) int {
	n := o.Counts["body fail"] + o.Counts["body service"] + o.Counts["body overrun"] + o.Counts["aborted in task"]
	for k, v := range o.Counts {
		if len(k) > 13 && k[:13] == "redriven from" {
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
