package holders

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/mutation"
	"github.com/leasehold/leasehold/testrig/proctest"
	"github.com/leasehold/leasehold/testrig/verify"
)

// envMutations runs TestR17Mutations in the default tier too.
const envMutations = "LEASEHOLD_R17_MUTATIONS"

// TestR17Mutations shows that R17's rows fail on deliberate bugs
// (internal/mutation, build tag leasehold_mutations):
//
//   - deadline-from-reply (the client takes a lease's local deadline from
//     the reply instead of from before the request): the Go client's
//     "late" row over the server, whose renewals are confirmed 1 s late
//     before the fault, must declare the loss too late (by about 1 s,
//     bound 500 ms) and work past its deadline. This one runs this
//     package's tests built with the tag, as a child process.
//   - no-group-signal (leasehold signals the command, not its group): the
//     run "keeper-stop" row, where only the supervisor can stop the
//     command, must see the grandchild beat past the deadline.
//   - no-death-signal (the keeper ignores its supervisor's death): the run
//     "group-kill" row must see the leftover beat on after leasehold's
//     group was killed (until the keeper's own SIGKILL a second after its
//     SIGTERM).
//
// Each bug is run `trials` times and must be caught every time. Long tier
// (or LEASEHOLD_R17_MUTATIONS=1): the builds take a minute.
func TestR17Mutations(t *testing.T) {
	if testing.Short() {
		t.Skip("R17's mutations build leasehold and the tests")
	}
	if !verify.Long() && os.Getenv(envMutations) == "" {
		t.Skipf("R17's mutations run in the long tier (LEASEHOLD_LONG=1) or with %s=1", envMutations)
	}
	if mutation.On("deadline-from-reply") || os.Getenv(mutation.Env) != "" {
		t.Skip("already a mutated run")
	}
	trials := verify.Size(3, 5)
	t.Run("deadline-from-reply", func(t *testing.T) {
		bin := verify.BuildMutated(t, ".", "R17's mutations")
		caught, took := 0, time.Duration(0)
		for i := range trials {
			start := time.Now()
			cmd := exec.Command(bin, "-test.run=^TestR17Client$/^server/late$", "-test.count=1", "-test.v")
			cmd.Env = verify.MutationEnv("deadline-from-reply")
			out, err := cmd.CombinedOutput()
			took += time.Since(start)
			text := string(out)
			switch {
			case err != nil && (strings.Contains(text, "work steps began after the local deadline") || strings.Contains(text, "loss declared")):
				caught++ // by the holder's checks
			case err != nil:
				t.Logf("trial %d failed, but not by the holder's checks:\n%s", i, verify.Clip(text, 30))
			default:
				t.Logf("trial %d passed with the bug:\n%s", i, verify.Clip(text, 30))
			}
		}
		mutationRow(t, "deadline-from-reply (client(server) late)", caught, trials, took)
	})
	proctest.MarkTrees(t)
	bin := buildLeasehold(t, "leasehold_mutations")
	for _, c := range []struct{ bug, fault, what string }{
		{"no-group-signal", faultKeeperStop, "heartbeats of the command after the local deadline"},
		{"no-death-signal", faultGroupKill, "the leftover beat"},
	} {
		t.Run(c.bug, func(t *testing.T) {
			start := time.Now()
			rows := runRows(t, bin, c.bug, []string{c.fault}, trials)
			caught, runs := 0, 0
			for _, r := range rows {
				runs += trials
				for _, v := range r.bad {
					if strings.Contains(v, c.what) {
						caught++
					}
				}
			}
			// A round has at most one violation of each kind.
			mutationRow(t, fmt.Sprintf("%s (run(server) %s)", c.bug, c.fault), min(caught, runs), runs, time.Since(start))
		})
	}
}

// mutationRow reports an R17-mutation row and requires every trial to
// have caught the bug.
func mutationRow(t *testing.T, store string, caught, trials int, took time.Duration) {
	t.Helper()
	verify.Report(t, verify.Row{Suite: "R17-mutation", Store: store, Ops: trials, Faults: trials, Violations: caught,
		Checker: fmt.Sprintf("caught %d/%d", caught, trials), Note: fmt.Sprintf("%s per trial", (took / time.Duration(max(trials, 1))).Round(100*time.Millisecond))})
	if caught < trials {
		t.Errorf("%s: caught in %d of %d trials, want all", store, caught, trials)
	}
}
