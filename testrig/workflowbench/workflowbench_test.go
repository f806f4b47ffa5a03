package workflowbench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/testrig/enginetest"
)

// TestRunSmall runs the experiment small on the engines at hand and checks
// what must hold whatever the timings: leasehold's strategies lose and
// duplicate nothing, adaptive applies every advance and, in approve, one
// application per round with every other caller told who applied it. No
// figure is asserted.
func TestRunSmall(t *testing.T) {
	cfg := Config{
		Workers: 20, PerWorker: 3, Rounds: 3, PostgresURL: os.Getenv("LEASEHOLD_TEST_POSTGRES"),
		AllowNoFsync: true, RedisURL: os.Getenv("LEASEHOLD_TEST_REDIS"), Dir: t.TempDir(),
		TransitionTimeout: 2 * time.Minute, Plot: filepath.Join(t.TempDir(), "cdf.png"),
	}
	if cfg.PostgresURL == "" {
		cfg.PostgresURL = "off"
		enginetest.Partial(t, "PostgreSQL", "$LEASEHOLD_TEST_POSTGRES is empty; the document's strategies are not run")
	}
	if cfg.RedisURL == "" {
		enginetest.Partial(t, "Redis", "$LEASEHOLD_TEST_REDIS is empty; the Redis-lock baseline is not run")
	}
	var out bytes.Buffer
	cfg.Out = &out
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, f := range res.Faults() {
		t.Error(f)
	}
	if cfg.PostgresURL != "off" {
		if _, err := os.Stat(cfg.Plot); err != nil {
			t.Errorf("no plot: %v", err)
		}
	}
	for _, want := range []string{"### advance", "### approve", "| leasehold adaptive | memory |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestFsyncRefused: a PostgreSQL with fsync off is refused unless allowed.
func TestFsyncRefused(t *testing.T) {
	url := os.Getenv("LEASEHOLD_TEST_POSTGRES")
	if url == "" {
		enginetest.Missing(t, "PostgreSQL", "$LEASEHOLD_TEST_POSTGRES is empty")
	}
	_, err := Run(context.Background(), Config{PostgresURL: url, Engines: []string{"postgres"}, Workers: 2, PerWorker: 1, Rounds: 1, Out: &bytes.Buffer{}})
	if err == nil {
		t.Skip("this PostgreSQL has fsync on")
	}
	if !strings.Contains(err.Error(), "fsync is off") {
		t.Fatalf("got %v", err)
	}
}

// TestTailGoal: the tail goal is met only when every strategy on the engine
// applied everything with a p99 under the bound and adaptive has 5 × the
// best baseline's applied/s (the printed pessimistic, which applies twice,
// is no baseline).
func TestTailGoal(t *testing.T) {
	row := func(system, engine string, baseline bool, applied int, p99 time.Duration) Row {
		r := Row{System: system, Engine: engine, Workload: "advance", Baseline: baseline, Intended: 100,
			Elapsed: time.Second, Latency: []time.Duration{p99}, Check: "ok"}
		r.Counts[kApplied] = applied
		if baseline {
			r.Intended = 1000 // the baselines apply a share only
		}
		return r
	}
	base := []Row{
		row("doc: Redis lock", "postgres", true, 19, 0),
		row("doc: pessimistic as printed (no transaction)", "postgres", true, 90, 0),
		row("optimistic", "redis", false, 100, 900*time.Millisecond),
		row("adaptive", "redis", false, 100, 10*time.Millisecond),
	}
	for _, tc := range []struct {
		name string
		rows func([]Row) []Row
		met  bool
	}{
		{"met", func(r []Row) []Row { return r }, true},
		{"tail", func(r []Row) []Row { r[2].Latency = []time.Duration{time.Second}; return r }, false},
		{"lost", func(r []Row) []Row { r[2].Counts[kApplied] = 99; return r }, false},
		{"double", func(r []Row) []Row { r[3].Check = "version 101 but 100 applied"; return r }, false},
		{"ratio", func(r []Row) []Row { r[0].Counts[kApplied] = 21; return r }, false},
		{"no baseline", func(r []Row) []Row { return r[2:] }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			tailGoal(&b, tc.rows(slices.Clone(base)), "redis")
			got := strings.Contains(b.String(), "**Met**")
			if got != tc.met || !strings.Contains(b.String(), "**Goal, advance tails (redis)**") {
				t.Fatalf("met %v, want %v: %s", got, tc.met, b.String())
			}
		})
	}
}
