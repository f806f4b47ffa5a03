package verify

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
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
