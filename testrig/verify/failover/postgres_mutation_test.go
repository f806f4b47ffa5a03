//go:build unix

package failover

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/verify"
)

// pgMutation is the deliberate bug R18's PostgreSQL row must catch
// (package internal/mutation): the store grants at once after it notices
// a new timeline (no hold-back; the token floor stays).
const pgMutation = "pg-no-holdback"

// envPgTrial makes TestR18PostgresTrial run: a pgTrialSpec (JSON).
const envPgTrial = "LEASEHOLD_R18_PG_TRIAL"

type pgTrialSpec struct {
	Promotions int
	Seed       uint64
}

const pgTrialLine = "R18-PG-TRIAL "

type pgTrialResult struct {
	Violations, Overlaps, Illegal, Regressions, CS, Lost, Promotions int
	First                                                            string
}

// TestR18PostgresTrial runs one short R18 run on PostgreSQL and prints its
// outcome as a line for TestR18PostgresMutation. It runs only as that
// test's child, in a build with the tag leasehold_mutations.
func TestR18PostgresTrial(t *testing.T) {
	raw := os.Getenv(envPgTrial)
	if raw == "" {
		t.Skip("run by TestR18PostgresMutation")
	}
	var spec pgTrialSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	r := pgRunFor(spec.Seed, "")
	r.promotions = spec.Promotions
	out := runPromotions(t, r)
	first := out.res.FirstBad
	if first == "" {
		first = out.or.First
	}
	b, _ := json.Marshal(pgTrialResult{Violations: out.violations(), Overlaps: out.res.Overlaps, Illegal: out.res.Illegal,
		Regressions: out.res.TokenRegressions, CS: out.res.CS, Lost: out.lost, Promotions: out.promotions, First: first})
	fmt.Println(pgTrialLine + string(b))
}

// TestR18PostgresMutation shows that the row catches a store without the
// hold-back: it builds this package's tests with the tag
// leasehold_mutations and runs short trials with pg-no-holdback switched
// on, one after another; each must find a violation (a second holder while
// the holder of a grant the promotion lost still believed it held the
// lease: an overlap, or a grant the model cannot place). The unmutated
// row, TestR18Postgres, is the control.
func TestR18PostgresMutation(t *testing.T) {
	bin := verify.BuildMutated(t, ".", "R18's PostgreSQL mutation")
	// The default tier runs trials until one catches the mutation, at
	// most 3 (a trial whose promotions lose no grant a holder still
	// believes in cannot catch it); the long tier runs 5, each of which
	// must.
	maxTrials := verify.Size(3, 5)
	caught, cs, lost, promotions, trials := 0, 0, 0, 0, 0
	var missed []string
	for i := 0; i < maxTrials && (verify.Long() || caught == 0); i++ {
		trials++
		seed := verify.Seed(t)
		spec, _ := json.Marshal(pgTrialSpec{Promotions: 3, Seed: seed})
		cmd := exec.Command(bin, "-test.run=^TestR18PostgresTrial$", "-test.v", "-test.count=1", "-test.timeout=5m")
		cmd.Env = append(verify.MutationEnv(pgMutation, envPgTrial), envPgTrial+"="+string(spec))
		var outb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &outb, &outb
		start := time.Now()
		err := cmd.Run()
		var r *pgTrialResult
		sc := bufio.NewScanner(strings.NewReader(outb.String()))
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), pgTrialLine); ok {
				r = new(pgTrialResult)
				if json.Unmarshal([]byte(line), r) != nil {
					r = nil
				}
			}
		}
		if r == nil {
			t.Fatalf("trial %d (seed %d): %v, no result:\n%s", i, seed, err, verify.Clip(outb.String(), 60))
		}
		cs += r.CS
		lost += r.Lost
		promotions += r.Promotions
		if r.Violations > 0 {
			caught++
			t.Logf("trial %d caught in %s (%d overlaps, %d illegal keys, %d token regressions; %d grants lost): %s",
				i, time.Since(start).Round(time.Second), r.Overlaps, r.Illegal, r.Regressions, r.Lost, r.First)
		} else {
			missed = append(missed, fmt.Sprintf("trial %d (seed %d): %d cycles, %d grants lost, nothing found", i, seed, r.CS, r.Lost))
		}
	}
	verify.Report(t, verify.Row{Suite: "R18-mutation", Store: pgMutation + " (postgres)", Ops: cs, Faults: promotions,
		Violations: caught, Checker: fmt.Sprintf("caught %d/%d", caught, trials),
		Note: fmt.Sprintf("trials of 3 promotions each with the hold-back off (token floor kept); %d acknowledged grants lost in all", lost)})
	if caught == 0 || (verify.Long() && caught < trials) {
		t.Errorf("%s caught in %d of %d trials:\n%s", pgMutation, caught, trials, strings.Join(missed, "\n"))
	}
}
