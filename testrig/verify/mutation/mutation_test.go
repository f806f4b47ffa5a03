package mutation_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// bugs are the deliberate bugs of package internal/mutation and the suite
// (in ./suites) that must catch each.
var bugs = []struct{ name, suite string }{
	{"grant-no-recheck", "TestSuiteEngine"},
	{"token-reuse", "TestSuiteRestart"},
	{"release-no-owner", "TestSuiteEngine"},
	{"deadline-from-reply", "TestSuiteReplyDelay"},
	{"expiry-wall-clock", "TestSuiteWallJump"},
	{"no-holdback", "TestSuiteRedisRestart"},
}

// runsPerBug is how many runs each bug gets: 10 in the long tier, 6 in
// the default one (CI's time budget). A bug must be caught in 90 % of them
// rounded down: 9 of 10, or 5 of 6. The default tier's check is weaker (a
// suite that caught a bug half the time would pass it 11 % of the time,
// against 1 % for 9 of 10): the long tier's figure is the one quoted.
var runsPerBug = verify.Size(6, 10)

// mustCatch is how many of runsPerBug runs must catch a bug.
func mustCatch() int { return runsPerBug * 9 / 10 }

type outcome int

const (
	passed  outcome = iota
	caught          // failed with the suites' "violations:" message
	broken          // failed otherwise (crash, timeout, undecided)
	skipped         // skipped (its engine is not installed)
)

type result struct {
	bug, suite string
	outcome    outcome
	took       time.Duration
	output     string
}

// TestMutationsCaught is R10. It builds the suites of ./suites once with
// the tag leasehold_mutations, runs each suite once with no bug (it must
// pass, or catching a bug would mean nothing) and each bug's suite ten
// times with the bug switched on, and requires the suite to fail with a
// violation in at least 9 of the 10 runs. Two runs go at once.
func TestMutationsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("R10 builds and runs a mutated test binary 65 times")
	}
	start := time.Now()
	bin := verify.BuildMutated(t, "./suites", "R10")
	buildTook := time.Since(start)

	type job struct{ bug, suite string }
	var jobs []job
	seen := map[string]bool{}
	for _, b := range bugs {
		if !seen[b.suite] {
			seen[b.suite] = true
			jobs = append(jobs, job{"", b.suite})
		}
	}
	for _, b := range bugs {
		for i := 0; i < runsPerBug; i++ {
			jobs = append(jobs, job{b.name, b.suite})
		}
	}
	results := make([]result, len(jobs))
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = runSuite(bin, j.bug, j.suite)
		}()
	}
	wg.Wait()
	t.Logf("%d runs in %s after the build", len(jobs), (time.Since(start) - buildTook).Round(time.Millisecond))

	skippedSuite := map[string]string{}
	for _, r := range results {
		if r.bug == "" {
			t.Logf("%s without a bug: %s in %s", r.suite, r.outcome, r.took.Round(time.Millisecond))
			if r.outcome == skipped {
				skippedSuite[r.suite] = r.output
				continue
			}
			if r.outcome != passed {
				t.Errorf("%s fails without any bug (%s), so its catching a bug means nothing:\n%s", r.suite, r.outcome, r.output)
			}
		}
	}
	for _, b := range bugs {
		if out, ok := skippedSuite[b.suite]; ok {
			t.Logf("%s: not checked, %s skipped:\n%s", b.name, b.suite, out)
			continue
		}
		n, errs := 0, 0
		var missed, failed string
		var took time.Duration
		for _, r := range results {
			if r.bug != b.name {
				continue
			}
			took += r.took
			switch r.outcome {
			case caught:
				n++
			case broken:
				errs++
				failed = r.output
			default:
				missed = r.output
			}
		}
		note := fmt.Sprintf("%s, %s per run", b.suite, (took / time.Duration(runsPerBug)).Round(time.Millisecond))
		if errs > 0 {
			note += fmt.Sprintf("; %d runs failed without a violation", errs)
		}
		verify.Report(t, verify.Row{Suite: "R10", Store: b.name, Ops: runsPerBug, Faults: 1, Violations: n,
			Checker: fmt.Sprintf("caught %d/%d", n, runsPerBug), Note: note})
		if n < mustCatch() {
			t.Errorf("%s: caught in %d of %d runs of %s", b.name, n, runsPerBug, b.suite)
			if missed != "" {
				t.Logf("a run that missed it:\n%s", missed)
			}
			if failed != "" {
				t.Logf("a run that failed without a violation:\n%s", failed)
			}
		}
	}
}

func (o outcome) String() string {
	return [...]string{"passed", "caught", "failed without a violation", "skipped"}[o]
}

// runSuite runs one suite of the mutated binary with bug switched on ("":
// none).
func runSuite(bin, bug, suite string) result {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^"+suite+"$", "-test.count=1", "-test.v", "-test.timeout=2m")
	cmd.Env = verify.MutationEnv(bug)
	cmd.Dir = filepath.Dir(bin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r := result{bug: bug, suite: suite, took: time.Since(start), output: out.String()}
	var exit *exec.ExitError
	switch {
	case err == nil && strings.Contains(r.output, "--- PASS: "+suite):
		r.outcome = passed
	case err == nil && strings.Contains(r.output, "--- SKIP: "+suite):
		r.outcome = skipped
	case errors.As(err, &exit) && strings.Contains(r.output, "violations: "):
		r.outcome = caught
	default:
		r.outcome = broken
		if err != nil {
			r.output += "\n" + err.Error()
		}
	}
	return r
}
