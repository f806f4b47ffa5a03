package wrappers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/wrappers"
)

func TestMain(m *testing.M) {
	wrappers.MaybeCommand()
	verify.Main(m)
}

// r13Stores are the targets of R13: every store (the lease server with its
// own log among them), and the server in front of Redis.
var r13Stores = append(slices.Clone(verify.AllStores), "server(redis)")

// defaultStores run in the default tier; the long tier runs all.
var defaultStores = []string{"sqlite", "redis", "server"}

// TestR13 is suite R13: supervisors of every mode ("leasehold run",
// "leasehold elect", "leasehold run --permits 2") contend for their names
// while their PIDs are SIGKILLed, SIGSTOPped for 1.5–3 × TTL and SIGTERMed,
// the engine (or server) is SIGKILLed and restarted, and, through the
// server, leases are force-released. Each command is a process tree (a
// child and a grandchild) that records its lifetime in heartbeats.
//
// Pass: no two trees of one lease alive at once, no more than 2 of the
// semaphore's, no force-released tree alive past its lease's deadline, and
// no command process left running one TTL after every supervisor exited.
func TestR13(t *testing.T) {
	if testing.Short() {
		t.Skip("R13 runs supervisors for seconds per store")
	}
	bin := wrappers.Build(t, t.TempDir(), "")
	for _, name := range r13Stores {
		t.Run(name, func(t *testing.T) {
			if !verify.Long() && !slices.Contains(defaultStores, name) {
				t.Skipf("R13 on %s is in the long tier (LEASEHOLD_LONG=1)", name)
			}
			var tg verify.Target
			if inner, ok := strings.CutPrefix(name, "server("); ok {
				tg = verify.ProxyTarget(t, verify.StartTarget(t, strings.TrimSuffix(inner, ")")))
			} else {
				tg = verify.StartTarget(t, name)
			}
			faults := []string{wrappers.FaultKill, wrappers.FaultStop, wrappers.FaultTerm}
			if !tg.Embedded() {
				faults = append(faults, wrappers.FaultEngine)
			}
			if strings.HasPrefix(name, "server") {
				faults = append(faults, wrappers.FaultForce)
			}
			ttl := max(time.Second, tg.Engine.MinTTL) // etcd's shortest exact lease TTL is 2 s
			seed := verify.Seed(t)
			cfg := wrappers.Config{Target: tg, Bin: bin, TTL: ttl,
				Run: 3, Elect: 3, Sem: 3, Permits: 2,
				Faults:   faults,
				Duration: verify.Size(15*time.Second, 3*time.Minute),
				Gap:      [2]time.Duration{300 * time.Millisecond, time.Second},
				Work:     [2]time.Duration{ttl, 4 * ttl},
				Seed:     seed, Dir: t.TempDir()}
			o := wrappers.Run(t, cfg)
			report(t, "R13", name, cfg, o, fmt.Sprintf("seed %d", seed))
		})
	}
}

// report writes o's row and fails t if it has a violation.
func report(t *testing.T, suite, store string, cfg wrappers.Config, o wrappers.Outcome, extra string) {
	t.Helper()
	checker := "ok"
	if o.Violations() > 0 {
		checker = "violations"
	}
	if o.BadLines > 0 {
		checker = "bad log"
	}
	verify.Report(t, verify.Row{Suite: suite, Store: store, Ops: len(o.Result.Trees), Faults: o.Total(),
		Violations: o.Violations(), Checker: checker, Note: o.Note(cfg) + "; " + extra})
	if o.Violations() > 0 || o.BadLines > 0 {
		var b strings.Builder
		for i, ov := range o.Result.Overlaps {
			if i == 10 {
				fmt.Fprintf(&b, "... %d more\n", len(o.Result.Overlaps)-10)
				break
			}
			fmt.Fprintf(&b, "overlap: %s\n", ov)
		}
		for _, l := range o.Result.Late {
			fmt.Fprintf(&b, "late after force-release: %s\n", l)
		}
		t.Errorf("violations: %d overlaps, %d late, %d survivors, %d bad log lines\n%s\nsupervisors:\n%s",
			len(o.Result.Overlaps), len(o.Result.Late), o.Survivors, o.BadLines, b.String(), wrappers.Logs(cfg.Dir))
	}
	if len(o.Result.Trees) == 0 {
		t.Errorf("no command ran:\n%s", wrappers.Logs(cfg.Dir))
	}
}

// TestR13Freeze measures a fault leasehold cannot see: a supervisor and its
// command's whole process group (the keeper included) SIGSTOPped together
// for 1.5–3 × TTL, then continued — a frozen host or container. The next
// grant's command may start meanwhile, and the frozen command runs again
// for a moment after the thaw, until its keeper reads the clock: such
// overlaps are counted, not failed. Pass: every frozen command gone within
// 1 s of its thaw, and no other overlap. Long tier only.
func TestR13Freeze(t *testing.T) {
	if !verify.Long() {
		t.Skip("R13-freeze is in the long tier (LEASEHOLD_LONG=1)")
	}
	bin := wrappers.Build(t, t.TempDir(), "")
	seed := verify.Seed(t)
	cfg := wrappers.Config{Target: verify.StartTarget(t, "sqlite"), Bin: bin, TTL: time.Second,
		Run: 3, Elect: 3,
		Faults:   []string{wrappers.FaultFreeze, wrappers.FaultFreeze, wrappers.FaultKill, wrappers.FaultTerm},
		Duration: 2 * time.Minute,
		Gap:      [2]time.Duration{300 * time.Millisecond, time.Second},
		Work:     [2]time.Duration{time.Second, 4 * time.Second},
		Seed:     seed, Dir: t.TempDir()}
	o := wrappers.Run(t, cfg)
	report(t, "R13-freeze", "sqlite", cfg, o, fmt.Sprintf("overlaps caused by a freeze are measured, not violations; seed %d", seed))
}
