package workflowbench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginetest"
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
