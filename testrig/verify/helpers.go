package verify

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/mutation"
	"github.com/leasehold/leasehold/testrig/proctest"
)

// EnvSeed fixes a suite's random seed (to rerun a failure).
const EnvSeed = "LEASEHOLD_VERIFY_SEED"

// Between returns a random duration in [lo, hi] (lo if hi <= lo).
func Between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// Seed returns $LEASEHOLD_VERIFY_SEED, or a fresh odd seed.
func Seed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", EnvSeed, err)
		}
		return v
	}
	return rand.Uint64() | 1
}

// Clip keeps the last keep lines of a long log, for a failure message.
func Clip(s string, keep int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= keep {
		return s
	}
	return fmt.Sprintf("[%d lines before]\n%s", len(lines)-keep, strings.Join(lines[len(lines)-keep:], "\n"))
}

// MutationEnv is this process's environment for a child test binary:
// without what would switch a deliberate bug on (internal/mutation), make
// the child write report rows or run as a worker or the command line, and
// without drop; plus bug switched on, unless it is "".
func MutationEnv(bug string, drop ...string) []string {
	env := proctest.EnvWithout(append([]string{mutation.Env, EnvReport, EnvWorker, EnvCLI}, drop...)...)
	if bug != "" {
		env = append(env, mutation.Env+"="+bug)
	}
	return env
}

// BuildMutated builds the test binary of package pkg (a path from the
// test's directory, "." for its own) with the tag leasehold_mutations, and
// returns its path. It skips the test without the go command (what says
// who needs it).
func BuildMutated(t testing.TB, pkg, what string) string {
	t.Helper()
	goBin := proctest.GoCommand()
	if goBin == "" {
		t.Skip(what + " needs the go command (not in GOROOT/bin nor on PATH) to build the mutated tests")
	}
	bin := filepath.Join(t.TempDir(), "mutated.test")
	start := time.Now()
	cmd := exec.Command(goBin, "test", "-c", "-tags", "leasehold_mutations", "-o", bin, pkg)
	cmd.Env = MutationEnv("")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the tests of %s with leasehold_mutations: %v\n%s", pkg, err, out)
	}
	t.Logf("built the mutated tests of %s in %s", pkg, time.Since(start).Round(time.Millisecond))
	return bin
}
