package wrappers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
	"github.com/leasehold/leasehold/testrig/verify/wrappers"
)

// wrapperBugs are the deliberate bugs of package internal/mutation that
// R13 must catch.
var wrapperBugs = []string{"no-group-signal", "no-death-signal"}

const runsPerBug = 10

// TestR13Mutations shows that R13 catches the wrapper bugs: it builds
// leasehold with the tag leasehold_mutations, runs a short R13 on SQLite
// once with no bug switched on (it must pass, or catching a bug would mean
// nothing; 12 s of faults) and ten times with each bug (faults until the
// first overlap, at most 20 s), and requires at least one overlap in at
// least 9 of the 10 runs of each.
// Runs go at once as -test.parallel allows (GOMAXPROCS: two here); they
// mostly sleep.
func TestR13Mutations(t *testing.T) {
	if testing.Short() {
		t.Skip("R13's mutations build leasehold and run it 21 times")
	}
	bin := wrappers.Build(t, t.TempDir(), "leasehold_mutations")
	type job struct {
		bug string
		i   int
	}
	jobs := []job{{"", 0}}
	for _, b := range wrapperBugs {
		for i := range runsPerBug {
			jobs = append(jobs, job{b, i})
		}
	}
	type res struct {
		o   wrappers.Outcome
		cfg wrappers.Config
	}
	results := make([]res, len(jobs))
	t.Run("runs", func(t *testing.T) {
		for i, j := range jobs {
			name := fmt.Sprintf("%s-%d", j.bug, j.i)
			if j.bug == "" {
				name = "no-bug"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				// A bug's run ends at its first overlap, or after 20 s of
				// faults; the control always runs its 12 s.
				d := 20 * time.Second
				if j.bug == "" {
					d = 12 * time.Second
				}
				cfg := wrappers.Config{Target: verify.StartTarget(t, "sqlite"), Bin: bin, TTL: time.Second,
					Run: 3, Elect: 2, StopAtOverlap: true,
					Faults:   []string{wrappers.FaultKill, wrappers.FaultStop, wrappers.FaultTerm},
					Duration: d,
					Gap:      [2]time.Duration{300 * time.Millisecond, 800 * time.Millisecond},
					Work:     [2]time.Duration{2 * time.Second, 4 * time.Second},
					Mutation: j.bug, Seed: verify.Seed(t), Dir: t.TempDir()}
				results[i] = res{wrappers.Run(t, cfg), cfg}
				t.Logf("%s: %s", name, results[i].o.Note(cfg))
			})
		}
	})
	if t.Failed() {
		return
	}
	ctl := results[0]
	report(t, "R13-mutation", "none (sqlite)", ctl.cfg, ctl.o, "the mutated build with no bug switched on: the control")
	for _, b := range wrapperBugs {
		caught, faults, trees := 0, 0, 0
		var took time.Duration
		var missed []string
		for i, j := range jobs {
			if j.bug != b {
				continue
			}
			o := results[i].o
			faults += o.Total()
			trees += len(o.Result.Trees)
			took += o.Took
			if len(o.Result.Overlaps) > 0 {
				caught++
			} else {
				missed = append(missed, o.Note(results[i].cfg))
			}
		}
		verify.Report(t, verify.Row{Suite: "R13-mutation", Store: b + " (sqlite)", Ops: trees, Faults: faults, Violations: caught,
			Checker: fmt.Sprintf("caught %d/%d", caught, runsPerBug),
			Note: fmt.Sprintf("runs with ≥ 1 overlap (each ends at its first, at most 20 s of faults); %s per run on average",
				(took / runsPerBug).Round(100*time.Millisecond))})
		if caught < 9 {
			t.Errorf("%s: caught in %d of %d runs; missed:\n%s", b, caught, runsPerBug, strings.Join(missed, "\n"))
		}
	}
}
